#!/bin/sh
# tests/proto/interop/run.sh PEER_GO C_PROGRAM OUT_DIR
# Builds the Go yamux peer against Debian's hashicorp/yamux, then runs the
# C side against it in both role pairings (the second with a 1 MiB Go
# receive window, so its SYN and ACK carry a non-zero window delta).
# A missing Go toolchain or yamux source fails the test: it never passes
# without having talked to a real peer.
set -eu
src=$1 prog=$2 out=$3
if ! command -v go >/dev/null 2>&1; then
    echo "FAIL: no 'go' on PATH: install golang-go (the interop test needs a real hashicorp/yamux peer)" >&2
    exit 1
fi
if [ ! -d /usr/share/gocode/src/github.com/hashicorp/yamux ]; then
    echo "FAIL: /usr/share/gocode/src/github.com/hashicorp/yamux missing: install golang-github-hashicorp-yamux-dev" >&2
    exit 1
fi
mkdir -p "$out"
# Without HOME (some CI runners) go has no build cache ("off"): use ours
case "$(go env GOCACHE 2>/dev/null)" in
    ""|off) export GOCACHE="$out/go-cache" ;;
esac
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= go build -o "$out/yamux-peer" "$src"
echo "== C client (odd ids), Go server"
"$prog" "$out/yamux-peer" client 262144
echo "== C server (even ids), Go client, Go window 1 MiB"
"$prog" "$out/yamux-peer" server 1048576
echo "== interop ok"
