// tests/proto/interop/peer.go: the other end of the yamux interop test,
// built against Debian's hashicorp/yamux (GO111MODULE=off
// GOPATH=/usr/share/gocode). The C program (yamux_interop.c) starts it
// with a socket as stdin and stdout.
//
// What it does: echoes every stream the C side opens (and counts the ones
// the C side resets); opens -open streams of its own, sends a pattern on
// each, half-closes, and checks the echo by SHA-256; pings the C side;
// then waits for the C side to go away and close the connection. Exits 0
// only if every check passed; says what failed on stderr.
package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

func pattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed*7919 + 17)
	for i := range b {
		x = x*1103515245 + 12345
		b[i] = byte(x >> 16)
	}
	return b
}

func main() {
	role := flag.String("role", "server", "yamux role: client or server")
	window := flag.Int("window", 256*1024, "MaxStreamWindowSize")
	wantAccept := flag.Int("accept", 0, "streams the C side will open (echoed)")
	wantResets := flag.Int("resets", 0, "of those, streams the C side resets")
	flag.Parse()

	var mu sync.Mutex
	failures := 0
	fail := func(format string, args ...interface{}) {
		mu.Lock()
		failures++
		mu.Unlock()
		fmt.Fprintf(os.Stderr, "go peer: FAIL: "+format+"\n", args...)
	}

	conn, err := net.FileConn(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go peer: stdin is not a socket: %v\n", err)
		os.Exit(2)
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = os.Stderr
	cfg.KeepAliveInterval = 500 * time.Millisecond // pings from this side during the transfers
	cfg.MaxStreamWindowSize = uint32(*window)
	var sess *yamux.Session
	if *role == "client" {
		sess, err = yamux.Client(conn, cfg)
	} else {
		sess, err = yamux.Server(conn, cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "go peer: %v\n", err)
		os.Exit(2)
	}

	// Echo whatever the C side opens
	var accepted, resets, echoed int64
	var echoes sync.WaitGroup
	go func() {
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			atomic.AddInt64(&accepted, 1)
			echoes.Add(1)
			go func(st *yamux.Stream) {
				defer echoes.Done()
				n, err := io.Copy(st, st)
				atomic.AddInt64(&echoed, n)
				if errors.Is(err, yamux.ErrConnectionReset) {
					atomic.AddInt64(&resets, 1)
					return
				}
				if err != nil {
					fail("echo on stream %d: %v", st.StreamID(), err)
				}
				st.Close()
			}(st)
		}
	}()

	// Streams of our own, echoed by the C side, several windows long
	sizes := []int{10, 700000, 2<<20 + 1}
	var own sync.WaitGroup
	for i, size := range sizes {
		own.Add(1)
		go func(i, size int) {
			defer own.Done()
			st, err := sess.OpenStream()
			if err != nil {
				fail("open: %v", err)
				return
			}
			data := pattern(i, size)
			// Reading and writing at once: the echo is flow controlled.
			// This yamux (2019) ends reads at a local Close when nothing
			// is buffered, so Close only once the whole echo is back.
			wrote := make(chan struct{})
			go func() {
				if _, err := st.Write(data); err != nil {
					fail("write on stream %d: %v", st.StreamID(), err)
				}
				close(wrote)
			}()
			got := make([]byte, size)
			if _, err := io.ReadFull(st, got); err != nil {
				fail("read on stream %d: %v", st.StreamID(), err)
				return
			}
			<-wrote
			st.Close()
			// The C side answers our FIN with its own: then EOF, no more bytes
			var extra [1]byte
			if n, err := st.Read(extra[:]); n != 0 || err != io.EOF {
				fail("stream %d: after the echo read %d bytes, %v (want EOF)", st.StreamID(), n, err)
			}
			want := sha256.Sum256(data)
			have := sha256.Sum256(got)
			if !bytes.Equal(want[:], have[:]) {
				fail("stream %d: echo of %d bytes came back as %d bytes, sha256 %x != %x",
					st.StreamID(), size, len(got), have[:8], want[:8])
			} else {
				fmt.Fprintf(os.Stderr, "go peer: stream %d: %d bytes echoed, sha256 %x ok\n",
					st.StreamID(), size, have[:8])
			}
		}(i, size)
	}

	if rtt, err := sess.Ping(); err != nil {
		fail("ping: %v", err)
	} else {
		fmt.Fprintf(os.Stderr, "go peer: ping answered in %v\n", rtt)
	}
	own.Wait()
	// Tell the C side we open nothing more (it checks it saw go away 0).
	// The C side may close the connection as soon as the frame arrives,
	// before GoAway hears that it was written: that is not a failure.
	if err := sess.GoAway(); err != nil && err != yamux.ErrSessionShutdown {
		fail("go away: %v", err)
	}

	// The C side goes away and closes the connection when it is done
	select {
	case <-sess.CloseChan():
	case <-time.After(30 * time.Second):
		fail("the C side did not close the session within 30 s")
	}
	echoes.Wait()
	if int(accepted) != *wantAccept {
		fail("accepted %d streams, expected %d", accepted, *wantAccept)
	}
	if int(resets) != *wantResets {
		fail("saw %d resets, expected %d", resets, *wantResets)
	}
	fmt.Fprintf(os.Stderr, "go peer: accepted %d streams (%d reset), echoed %d bytes, %d failures\n",
		accepted, resets, echoed, failures)
	if failures > 0 {
		os.Exit(1)
	}
}
