package relaybus

// Version is the version of relaybus this code is. A release commit carries
// the trailer "Release: vVersion" and the annotated tag vVersion; between
// releases it names the next one with a "-dev" suffix.
const Version = "0.2.2"
