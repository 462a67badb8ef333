package postgres_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// listenProxy is a TCP proxy on 127.0.0.1 in front of the test server,
// for the tests of a listener that loses its connection or its
// notifications. Every connection of the store goes through it (the
// listener connects with the pool's settings); it tells the listener's
// from the others by the LISTEN it sends, and does to those only what the
// test asks: drop them, refuse them (close a connection as it sends
// LISTEN), or hold back what the server sends them.
type listenProxy struct {
	ln     net.Listener
	target string

	mu           sync.Mutex
	conns        map[*proxyConn]struct{}
	refuseListen bool
	held         bool          // hold back what the server sends listeners
	unheld       chan struct{} // closed when held ends
	wg           sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	listener       bool // guarded by listenProxy.mu
}

// startListenProxy starts a proxy to target (host:port) and stops it when
// the test ends.
func startListenProxy(t *testing.T, target string) *listenProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &listenProxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}, unheld: make(chan struct{})}
	close(p.unheld)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// addr is the proxy's host:port.
func (p *listenProxy) addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

func (p *listenProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		pc := &proxyConn{client: c, server: s}
		p.mu.Lock()
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.clientToServer(pc) })
		p.wg.Go(func() { p.serverToClient(pc) })
	}
}

// listenMarker is what a LISTEN statement starts with in the simple
// query protocol's Query message.
var listenMarker = []byte(`LISTEN "`)

func (p *listenProxy) clientToServer(pc *proxyConn) {
	defer p.drop(pc)
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.client.Read(buf)
		if n > 0 {
			if bytes.Contains(buf[:n], listenMarker) {
				p.mu.Lock()
				pc.listener = true
				refuse := p.refuseListen
				p.mu.Unlock()
				if refuse {
					return
				}
			}
			if _, werr := pc.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *listenProxy) serverToClient(pc *proxyConn) {
	defer p.drop(pc)
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			wait := p.unheld
			if !pc.listener {
				wait = nil
			}
			p.mu.Unlock()
			if wait != nil {
				<-wait
			}
			if _, werr := pc.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *listenProxy) drop(pc *proxyConn) {
	pc.client.Close()
	pc.server.Close()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// dropListeners closes every listener connection, as a network fault
// would, and returns how many it closed.
func (p *listenProxy) dropListeners() int {
	p.mu.Lock()
	var ls []*proxyConn
	for pc := range p.conns {
		if pc.listener {
			ls = append(ls, pc)
		}
	}
	p.mu.Unlock()
	for _, pc := range ls {
		p.drop(pc)
	}
	return len(ls)
}

// setRefuseListen makes the proxy close every connection that sends a
// LISTEN from now on (on), or pass them again (off).
func (p *listenProxy) setRefuseListen(on bool) {
	p.mu.Lock()
	p.refuseListen = on
	p.mu.Unlock()
}

// hold holds back what the server sends the listeners (notifications)
// until the returned release is called, as a lost or late notification.
func (p *listenProxy) hold() (release func()) {
	p.mu.Lock()
	c := make(chan struct{})
	p.unheld, p.held = c, true
	p.mu.Unlock()
	return func() { p.release(c) }
}

// release ends the hold of c, unless it has ended.
func (p *listenProxy) release(c chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held && p.unheld == c {
		p.held = false
		close(c)
	}
}

func (p *listenProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	c := p.unheld
	p.mu.Unlock()
	p.release(c)
	for _, pc := range conns {
		p.drop(pc)
	}
	p.wg.Wait()
}
