package postgres

import (
	"embed"
	"fmt"
	"strings"
	"text/template"
)

// sqlFiles are the store's statements, one file per concern, parsed
// into one template set: see SQL in the package documentation. A file's
// text outside its {{define}} blocks is never rendered (schema.sql, the
// one file rendered whole, aside), so the comments there are not sent.
//
//go:embed *.sql
var sqlFiles embed.FS

var sqlTemplates = template.Must(template.New("sql").Option("missingkey=error").ParseFS(sqlFiles, "*.sql"))

// SchemaVersion is the version number this store records in the
// <prefix>schema_version table. 0.1.0 recorded none (its marker is the
// deliveries.lease_token column). Setup refuses a schema whose recorded
// version is higher.
const SchemaVersion = 2

// sqlNames is what the templates are rendered with: the validated
// identifiers and the limits the statements spell out. Schema and Prefix
// must have passed validateIdentifier: the templates quote them, and the
// pattern keeps a quote from ever being part of them.
type sqlNames struct {
	Schema, Prefix                           string // unquoted, for the schema script's object names
	Events, Deliveries, Keys, Lanes, History string // quoted, schema-qualified table names
	Paused                                   string // quoted, schema-qualified: the paused handlers
	Counts                                   string // quoted, schema-qualified: the statistics counters (counters.sql)

	ClaimQuota int // claimQuota
	ClaimWalk  int // claimWalk
}

func newSQLNames(schema, prefix string) sqlNames {
	table := func(name string) string { return fmt.Sprintf(`"%s"."%s%s"`, schema, prefix, name) }
	return sqlNames{Schema: schema, Prefix: prefix,
		Events: table("events"), Deliveries: table("deliveries"), Keys: table("keys"),
		Lanes: table("lanes"), History: table("history"), Paused: table("paused_handlers"),
		Counts:     table("counts"),
		ClaimQuota: claimQuota, ClaimWalk: claimWalk}
}

// endingSQL is the data of lease.sql's endClaim: the names, and the
// assignments a reschedule, bury or release adds.
type endingSQL struct {
	sqlNames
	Set string
}

// Ending is endClaim's data for the assignments set (called by the
// templates).
func (n sqlNames) Ending(set string) endingSQL { return endingSQL{n, set} }

// render executes the template name with data.
func render(name string, data any) (string, error) {
	var b strings.Builder
	if err := sqlTemplates.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("relaybus/postgres: render %s: %w", name, err)
	}
	return b.String(), nil
}

// renderSchema renders the schema script for the validated identifiers
// schema and prefix.
func renderSchema(schema, prefix string) (string, error) {
	return render("schema.sql", newSQLNames(schema, prefix))
}

// queries are the statements of a store, rendered once at New with its
// schema and table prefix. Each field is rendered from the template of
// its name.
type queries struct {
	names sqlNames // for the statements rendered per call (DeliveryList)

	publishPlan     string
	publishPlanOwn  string
	publishInsert   string
	publishAlone    string
	publishOne      string
	publishOneAlone string
	publishNumber   string
	publishStale    string
	publishRestore  string

	claimPrelude string
	claimAsync   string
	claimCount   string
	claimLock    string
	claimLockAt  string
	claimOwn     string
	claimTake    string
	claimWrite   string
	extend       string
	lockLane     string
	lockHeld     string
	lockOwned    string

	completePlan        string
	completeMany        string
	completeManyHistory string
	completeTx          string
	completeTxHistory   string
	reschedule          string
	bury                string
	release             string
	relinquish          string

	requeue       string
	requeueStatus string

	statisticsSerial string
	statisticsCounts string

	statisticsCounted     string
	countersState         string
	countersInstall       string
	countersRemove        string
	countersDueIndex      string
	countersDueIndexDrop  string
	countersDueIndexState string

	purgeDead      string
	purgeCompleted string
	purgeHistory   string
	purgeEvents    string

	setupLock string

	storeHealth string

	pause      string
	resume     string
	pausedList string
}

// buildQueries renders every statement for the validated identifiers
// schema and prefix.
func buildQueries(schema, prefix string) (queries, error) {
	q := queries{names: newSQLNames(schema, prefix)}
	for _, st := range []struct {
		name string
		dst  *string
	}{
		{"publishPlan", &q.publishPlan},
		{"publishPlanOwn", &q.publishPlanOwn},
		{"publishInsert", &q.publishInsert},
		{"publishInsertAlone", &q.publishAlone},
		{"publishInsertOne", &q.publishOne},
		{"publishInsertOneAlone", &q.publishOneAlone},
		{"publishNumber", &q.publishNumber},
		{"publishStale", &q.publishStale},
		{"publishRestore", &q.publishRestore},
		{"claimPrelude", &q.claimPrelude},
		{"claimAsync", &q.claimAsync},
		{"claimCount", &q.claimCount},
		{"claimLock", &q.claimLock},
		{"claimLockLanes", &q.claimLockAt},
		{"claimOwn", &q.claimOwn},
		{"claimTake", &q.claimTake},
		{"claimWrite", &q.claimWrite},
		{"extend", &q.extend},
		{"lockLane", &q.lockLane},
		{"lockHeld", &q.lockHeld},
		{"lockOwned", &q.lockOwned},
		{"completePlan", &q.completePlan},
		{"completeMany", &q.completeMany},
		{"completeManyHistory", &q.completeManyHistory},
		{"completeTx", &q.completeTx},
		{"completeTxHistory", &q.completeTxHistory},
		{"reschedule", &q.reschedule},
		{"bury", &q.bury},
		{"release", &q.release},
		{"relinquish", &q.relinquish},
		{"requeue", &q.requeue},
		{"requeueStatus", &q.requeueStatus},
		{"statisticsSerial", &q.statisticsSerial},
		{"statisticsCounts", &q.statisticsCounts},
		{"statisticsCounted", &q.statisticsCounted},
		{"countersState", &q.countersState},
		{"countersInstall", &q.countersInstall},
		{"countersRemove", &q.countersRemove},
		{"countersDueIndex", &q.countersDueIndex},
		{"countersDueIndexDrop", &q.countersDueIndexDrop},
		{"countersDueIndexState", &q.countersDueIndexState},
		{"purgeDead", &q.purgeDead},
		{"purgeCompleted", &q.purgeCompleted},
		{"purgeHistory", &q.purgeHistory},
		{"purgeEvents", &q.purgeEvents},
		{"setupLock", &q.setupLock},
		{"storeHealth", &q.storeHealth},
		{"pause", &q.pause},
		{"resume", &q.resume},
		{"pausedList", &q.pausedList},
	} {
		sql, err := render(st.name, q.names)
		if err != nil {
			return queries{}, err
		}
		*st.dst = sql
	}
	return q, nil
}
