# Shared settings of the test cluster scripts (tests/k8s/build, up, down,
# import-image, cluster_test): sourced, never run. Every name the cluster
# uses on the machine (ports, CIDRs, interfaces, iptables chains, paths) is
# set here so that down removes exactly what up made.

K8S_VERSION=v1.37.2            # kube-apiserver, controller-manager, scheduler, kubelet, kubectl
KUBE_ROUTER_VERSION=v2.1.0     # NetworkPolicy enforcement (test-only)
K8S_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Build cache: binaries, Go module and build caches. Survives between runs.
if [ -n "${AH_TEST_K8S_CACHE:-}" ]; then
    K8S_CACHE=$AH_TEST_K8S_CACHE
elif [ "$(id -u)" = 0 ] || [ -w /var/cache ]; then
    K8S_CACHE=/var/cache/agenthold-k8s
else
    K8S_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/agenthold-k8s
fi
# Cluster state: certificates, etcd data, containerd root, kubelet root, logs.
K8S_DIR=${AH_TEST_K8S_DIR:-/tmp/agenthold-k8s}
# Runtime sockets and pid files (short paths: unix socket names are limited).
K8S_RUN=/run/agenthold-k8s
K8S_CTRD_SOCK=$K8S_RUN/containerd.sock

# Ports (agenthold's k8s range is 19400-19499; the cluster takes 19400-19419).
K8S_ETCD_PORT=19400
K8S_ETCD_PEER_PORT=19401
K8S_API_PORT=19443
K8S_KUBELET_PORT=19410
K8S_KUBELET_HEALTHZ_PORT=19411
K8S_SCHEDULER_PORT=19412
K8S_CM_PORT=19413
K8S_ROUTER_HEALTH_PORT=19414
K8S_ROUTER_METRICS_PORT=19416
K8S_CRI_STREAM_PORT=19415

# Networks: apart from Docker's pools (172.17.0.0/16 and up, 192.168.0.0/16)
# and agenthold's own network_pool (10.213.0.0/16, etc/agenthold.yaml).
K8S_POD_CIDR=10.244.0.0/24
K8S_POD_GW=10.244.0.1
K8S_SERVICE_CIDR=10.96.0.0/12
K8S_SERVICE_IP=10.96.0.1
K8S_BRIDGE=ahk8s0              # the CNI bridge (not cni0: ours alone)
K8S_CNI_NET=agenthold-k8s      # CNI network name (host-local keeps leases under it)

# The node's address: the one the default route leaves from.
k8s_node_ip () {
    ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}

# The Go toolchain: /usr/local/go (1.26) before Debian's older golang-go.
k8s_go () {
    if [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go
    else command -v go || true; fi
}

# Key of one build: the pinned module files, the Go version and this
# script's build flags. Binaries live in $K8S_CACHE/bin/<key>/.
k8s_build_key () {
    local go; go=$(k8s_go)
    { cat "$K8S_HERE/kube/go.mod" "$K8S_HERE/kube/go.sum" \
          "$K8S_HERE/kube-router/go.mod" "$K8S_HERE/kube-router/go.sum"
      "$go" version 2>/dev/null; echo "flags-1"; } | sha256sum | cut -c1-16
}
K8S_BINS="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"

# Seconds since the epoch with a fraction, and a step's duration.
k8s_now () { date +%s.%N; }
k8s_took () { awk -v a="$1" -v b="$(k8s_now)" 'BEGIN { printf "%.1fs", b - a }'; }
