package dbenv

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestValidateMongoURI(t *testing.T) {
	t.Parallel()
	for uri, wantErr := range map[string]string{
		"mongodb://127.0.0.1:27017/?directConnection=true": "",
		"mongodb://a:1,b:2/?replicaSet=rs0":                "",
		"mongodb+srv://cluster.example.com/":               "",
		"mongodb://user:pw@127.0.0.1:27017/admin":          "",
		"postgres://127.0.0.1/":                            "scheme",
		"//127.0.0.1:27017":                                "scheme",
		"mongodb:///db":                                    "no host",
		"mongodb://%zz":                                    "not a URL",
	} {
		err := validateMongoURI(uri)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("validateMongoURI(%q) = %v, want nil", uri, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("validateMongoURI(%q) = %v, want an error containing %q", uri, err, wantErr)
		}
	}
}

func TestStartMongoGivenURI(t *testing.T) {
	t.Parallel()
	const uri = "mongodb://127.0.0.1:1/?replicaSet=rs0"
	m, err := StartMongo(context.Background(), MongoOptions{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	if m.URI() != uri || m.Source() != "uri" {
		t.Fatalf("got URI %q source %q", m.URI(), m.Source())
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatalf("Stop of a given URI: %v", err)
	}
	if _, err := StartMongo(context.Background(), MongoOptions{URI: "http://x/"}); err == nil {
		t.Fatal("StartMongo accepted an http URI")
	}
}

// TestStartMongoWithoutContainers: this test binary has no container
// provider (as the library's tests), so without a URI there is no MongoDB,
// and the error says so.
func TestStartMongoWithoutContainers(t *testing.T) {
	t.Parallel()
	_, err := StartMongo(context.Background(), MongoOptions{})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no URI given") || !strings.Contains(err.Error(), "no container provider") {
		t.Fatalf("StartMongo without URI or container provider = %v, want ErrUnavailable saying why", err)
	}
}
