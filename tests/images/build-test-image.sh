#!/bin/sh
# tests/images/build-test-image.sh: builds a tiny sandbox test image with no
# registry: FROM scratch, Debian's static busybox installed as /bin/*, an
# /etc/passwd with the `agent` account (uid 1000, home /home/agent).
# sandboxd is not in the image: the driver mounts it at /opt/agenthold.
#
# Usage: build-test-image.sh TAG [SOCKET]
# Talks to the Docker Engine API (POST /build) with curl over the unix
# socket; prints the image id on success, the engine's error otherwise.
set -eu
tag=${1:?usage: build-test-image.sh TAG [SOCKET]}
sock=${2:-/var/run/docker.sock}
busybox=/bin/busybox
if [ ! -x "$busybox" ]; then
    echo "build-test-image: $busybox is missing (apt-get install busybox-static)" >&2
    exit 1
fi
case "$(ldd "$busybox" 2>&1 || true)" in
    *"not a dynamic executable"*|*"statically linked"*) ;;
    *) echo "build-test-image: $busybox is not static (install busybox-static)" >&2; exit 1 ;;
esac
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/etc" "$ctx/home/agent" "$ctx/tmp"
cp "$busybox" "$ctx/bin/busybox"
cat > "$ctx/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
agent:x:1000:1000:agent:/home/agent:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
P
cat > "$ctx/etc/group" <<'G'
root:x:0:
agent:x:1000:
nogroup:x:65534:
G
cat > "$ctx/Dockerfile" <<'D'
FROM scratch
COPY bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY etc/passwd etc/group /etc/
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /home/agent /tmp /root && chown 1000:1000 /home/agent && chmod 1777 /tmp"]
LABEL agenthold.test=true
ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
D
tar -C "$ctx" -cf "$ctx.tar" Dockerfile bin etc home tmp
trap 'rm -rf "$ctx" "$ctx.tar"' EXIT
esc=$(printf '%s' "$tag" | sed 's/:/%3A/g; s/\//%2F/g')
out=$(curl -sS --unix-socket "$sock" -X POST -H 'Content-Type: application/x-tar' \
      --data-binary "@$ctx.tar" "http://docker/build?t=$esc&rm=1&forcerm=1&labels=%7B%22agenthold.test%22%3A%22true%22%7D") || {
    echo "build-test-image: cannot reach the Docker Engine at $sock" >&2; exit 1; }
if printf '%s' "$out" | grep -q '"errorDetail"\|"error"'; then
    echo "build-test-image: the engine could not build $tag:" >&2
    printf '%s\n' "$out" | grep error >&2
    exit 1
fi
id=$(curl -sS --unix-socket "$sock" "http://docker/images/$esc/json" | sed -n 's/^{"Id":"\([^"]*\)".*/\1/p')
if [ -z "$id" ]; then
    echo "build-test-image: the build said nothing wrong but image $tag is not there" >&2
    exit 1
fi
echo "$id"
