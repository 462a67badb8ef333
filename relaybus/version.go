package relaybus

// Version is the version of relaybus this code is. A release commit carries
// the trailer "Release: vVersion" and the annotated tag vVersion.
const Version = "0.1.2"
