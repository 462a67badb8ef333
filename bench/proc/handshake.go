package proc

import (
	"context"
	"fmt"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// HandshakeTimeout bounds how long a freshly built worker may take to say
// hello.
const HandshakeTimeout = 30 * time.Second

// Handshake starts `bin worker` with an empty config and reads its hello:
// the protocol, version and capabilities of that build. A worker must
// write hello before it reads its config, so this works for every role.
// A protocol newer than this harness knows, or no hello, is an error.
func Handshake(ctx context.Context, bin string) (*protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	p, err := startWorker(bin, "handshake", nil, "")
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	hello, err := p.Hello(ctx)
	if err != nil {
		return nil, fmt.Errorf("proc: handshake with %s: %w", bin, err)
	}
	if err := CheckHello(hello); err != nil {
		return nil, fmt.Errorf("proc: handshake with %s: %w", bin, err)
	}
	return hello, nil
}

// CheckHello accepts protocols 1 to protocol.Version.
func CheckHello(hello *protocol.Message) error {
	switch {
	case hello.Protocol < 1:
		return fmt.Errorf("proc: worker hello without a protocol number (got %d)", hello.Protocol)
	case hello.Protocol > protocol.Version:
		return fmt.Errorf("proc: worker speaks protocol %d but this harness knows only up to %d: run the harness of the newer ref (check out the candidate and run its cmd/bench)", hello.Protocol, protocol.Version)
	}
	return nil
}
