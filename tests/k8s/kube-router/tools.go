//go:build tools

// The command tests/k8s/build builds (keeps go.mod and go.sum complete).
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
