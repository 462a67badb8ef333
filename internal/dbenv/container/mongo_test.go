package container

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/internal/dbenv"
)

func TestMongoContainerURI(t *testing.T) {
	t.Parallel()
	uri := mongoContainerURI(40123)
	if uri != "mongodb://127.0.0.1:40123/?directConnection=true" {
		t.Fatalf("mongoContainerURI = %q", uri)
	}
	// dbenv checks the URI a provider returns: this one must pass.
	m, err := dbenv.StartMongo(context.Background(), dbenv.MongoOptions{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	if m.URI() != uri {
		t.Fatalf("URI = %q", m.URI())
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

func TestStartMongoWithoutDocker(t *testing.T) {
	t.Parallel()
	if DockerAvailable(context.Background()) == nil {
		t.Skip("a Docker engine answers: this test checks the error without one")
	}
	_, err := dbenv.StartMongo(context.Background(), dbenv.MongoOptions{})
	if !errors.Is(err, dbenv.ErrUnavailable) || !strings.Contains(err.Error(), "no URI given") {
		t.Fatalf("StartMongo without URI or Docker = %v, want ErrUnavailable saying why", err)
	}
}
