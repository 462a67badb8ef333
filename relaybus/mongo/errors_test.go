package mongo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestErrorFrom(t *testing.T) {
	t.Parallel()
	if errorFrom("op", nil) != nil {
		t.Fatal("errorFrom(nil) is not nil")
	}
	writeConflict := mongo.CommandError{Code: 112, Name: "WriteConflict", Labels: []string{"TransientTransactionError"}}
	duplicate := mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000, Message: "E11000 duplicate key"}}}
	tests := []struct {
		name    string
		in      error
		is      []error // errors.Is must hold for each
		prefix  bool    // text starts with "relaybus/mongo: op: "
		labeled bool    // TransientTransactionError holds
		dup     bool    // mongo.IsDuplicateKeyError holds
	}{
		{name: "canceled", in: context.Canceled, is: []error{context.Canceled}, prefix: true},
		{name: "deadline", in: fmt.Errorf("server selection error: %w", context.DeadlineExceeded), is: []error{context.DeadlineExceeded}, prefix: true},
		{name: "no documents", in: mongo.ErrNoDocuments, is: []error{relaytype.ErrNotFound, mongo.ErrNoDocuments}, prefix: true},
		{name: "disconnected", in: mongo.ErrClientDisconnected, is: []error{relaytype.ErrClosed, mongo.ErrClientDisconnected}, prefix: true},
		{name: "write conflict keeps its label", in: writeConflict, prefix: true, labeled: true},
		{name: "duplicate key stays visible", in: duplicate, prefix: true, dup: true},
		{name: "other", in: errors.New("boom"), prefix: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := errorFrom("op", tt.in)
			for _, target := range tt.is {
				if !errors.Is(got, target) {
					t.Errorf("errorFrom(%v) = %v, not errors.Is %v", tt.in, got, target)
				}
			}
			if tt.prefix && !strings.HasPrefix(got.Error(), "relaybus/mongo: op: ") {
				t.Errorf("errorFrom text %q does not say where", got)
			}
			if TransientTransactionError(got) != tt.labeled {
				t.Errorf("TransientTransactionError(%v) = %v, want %v", got, !tt.labeled, tt.labeled)
			}
			if mongo.IsDuplicateKeyError(got) != tt.dup {
				t.Errorf("IsDuplicateKeyError(%v) = %v, want %v", got, !tt.dup, tt.dup)
			}
			if errors.Is(got, relaytype.ErrNotFound) && !errors.Is(tt.in, mongo.ErrNoDocuments) {
				t.Errorf("errorFrom(%v) claims not found", tt.in)
			}
		})
	}
}

func TestNamespaceExists(t *testing.T) {
	t.Parallel()
	if !namespaceExists(fmt.Errorf("create: %w", mongo.CommandError{Code: codeNamespaceExists, Name: "NamespaceExists"})) {
		t.Error("code 48 not recognised")
	}
	if namespaceExists(mongo.CommandError{Code: 13, Name: "Unauthorized"}) || namespaceExists(errors.New("x")) {
		t.Error("other errors taken for NamespaceExists")
	}
}

func TestReplicaSetError(t *testing.T) {
	t.Parallel()
	if err := replicaSetError(helloReply{}); !errors.Is(err, errStandalone) || !strings.Contains(err.Error(), "replica set") {
		t.Errorf("standalone: %v", err)
	}
	if err := replicaSetError(helloReply{SetName: "rs0"}); err != nil {
		t.Errorf("replica set member: %v", err)
	}
	if err := replicaSetError(helloReply{Msg: "isdbgrid"}); err != nil {
		t.Errorf("mongos: %v", err)
	}
}

func TestInvalidf(t *testing.T) {
	t.Parallel()
	err := invalidf("field %q is %d", "x", 3)
	if !errors.Is(err, relaytype.ErrInvalid) || err.Error() != `relaybus/mongo: field "x" is 3: relaybus: invalid input` {
		t.Fatalf("invalidf = %q", err)
	}
}
