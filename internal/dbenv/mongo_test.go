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

func TestMongoContainerURI(t *testing.T) {
	t.Parallel()
	uri := mongoContainerURI(40123)
	if uri != "mongodb://127.0.0.1:40123/?directConnection=true" {
		t.Fatalf("mongoContainerURI = %q", uri)
	}
	if err := validateMongoURI(uri); err != nil {
		t.Fatal(err)
	}
}

func TestMongoImage(t *testing.T) {
	t.Setenv(EnvMongoImage, "")
	if got := mongoImage(""); got != DefaultMongoImage {
		t.Errorf("default image = %q, want %q", got, DefaultMongoImage)
	}
	t.Setenv(EnvMongoImage, "mongo:8")
	if got := mongoImage(""); got != "mongo:8" {
		t.Errorf("image from %s = %q, want mongo:8", EnvMongoImage, got)
	}
	if got := mongoImage("mongo:6"); got != "mongo:6" {
		t.Errorf("image from option = %q, want mongo:6", got)
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

func TestStartMongoWithoutDocker(t *testing.T) {
	t.Parallel()
	if DockerAvailable(context.Background()) == nil {
		t.Skip("a Docker engine answers: this test checks the error without one")
	}
	_, err := StartMongo(context.Background(), MongoOptions{})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no URI given") {
		t.Fatalf("StartMongo without URI or Docker = %v, want ErrUnavailable saying why", err)
	}
}
