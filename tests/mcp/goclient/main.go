// tests/mcp/goclient: a real MCP client (the official Go SDK,
// github.com/modelcontextprotocol/go-sdk) against agenthold's POST /mcp,
// over the streamable HTTP transport with the bearer token. It connects
// as the SDK does by default (its server/discover probe refused, then
// initialize), lists the tools and the resource templates, creates an
// agent, runs a command, writes, reads, lists and searches a file, reads
// it and the home's listing as resources, reads bytes that are not UTF-8
// as a blob, and checks an unknown tool and a route's refusal. Resources:
// the capability, the template, the list (our agent's home, not another
// tenant's), a text file and binary files written by the tools, a file of
// exactly 8 MiB read whole and one byte more refused (-32603, status 413),
// hostile paths refused (-32602, the route's 400), and OTHER, an agent of
// another tenant holding a file, the same -32002 as an agent that does not
// exist.
//
// usage: goclient URL TOKEN AGENT OTHER
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func text(r *mcp.CallToolResult) string {
	if len(r.Content) == 0 {
		fail("a result without content: %+v", r)
	}
	t, ok := r.Content[0].(*mcp.TextContent)
	if !ok {
		fail("not text content: %T", r.Content[0])
	}
	return t.Text
}

func main() {
	if len(os.Args) != 5 {
		fail("usage: goclient URL TOKEN AGENT OTHER")
	}
	url, token, agent, other := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}, Timeout: 90 * time.Second}
	client := mcp.NewClient(&mcp.Implementation{Name: "agenthold-goclient", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		fail("connect: %v", err)
	}
	defer cs.Close()
	init := cs.InitializeResult()
	if init.ServerInfo.Name != "agenthold" || init.ProtocolVersion != "2025-06-18" {
		fail("initialize: %+v (version %s)", init.ServerInfo, init.ProtocolVersion)
	}
	if init.Capabilities == nil || init.Capabilities.Resources == nil || init.Capabilities.Tools == nil {
		fail("initialize: the tools and resources capabilities: %+v", init.Capabilities)
	}
	fmt.Printf("connected: %s %s, protocol %s\n", init.ServerInfo.Name, init.ServerInfo.Version, init.ProtocolVersion)
	if err := cs.Ping(ctx, nil); err != nil {
		fail("ping: %v", err)
	}

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		fail("tools/list: %v", err)
	}
	var names []string
	for _, t := range tools.Tools {
		names = append(names, t.Name)
		if t.InputSchema == nil {
			fail("%s has no inputSchema", t.Name)
		}
	}
	sort.Strings(names)
	want := "create_agent exec list_files open_port read_file search_files start_agent stop_agent write_file"
	if strings.Join(names, " ") != want {
		fail("tools: %v", names)
	}
	fmt.Printf("tools: %d\n", len(names))

	call := func(name string, args map[string]any, isError bool) *mcp.CallToolResult {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			fail("%s: %v", name, err)
		}
		if r.IsError != isError {
			fail("%s %v: isError %v: %s", name, args, r.IsError, text(r))
		}
		return r
	}
	decode := func(r *mcp.CallToolResult, v any) {
		if err := json.Unmarshal([]byte(text(r)), v); err != nil {
			fail("not JSON: %v: %q", err, text(r))
		}
	}

	var made struct{ Name, State, Tenant string }
	decode(call("create_agent", map[string]any{"name": agent}, false), &made)
	if made.Name != agent || made.State != "running" {
		fail("create_agent: %+v", made)
	}
	var ran struct {
		Status         int
		Stdout, Stderr string
	}
	decode(call("exec", map[string]any{"agent": agent, "cmd": "echo hello; echo oops >&2; exit 4"}, false), &ran)
	if ran.Status != 4 || ran.Stdout != "hello\n" || ran.Stderr != "oops\n" {
		fail("exec: %+v", ran)
	}
	fmt.Println("create_agent, exec: ok")

	call("write_file", map[string]any{"agent": agent, "path": "notes.txt", "content": "alpha\nneedle in a haystack\n"}, false)
	if got := text(call("read_file", map[string]any{"agent": agent, "path": "notes.txt"}, false)); got != "alpha\nneedle in a haystack\n" {
		fail("read_file: %q", got)
	}
	var listing struct {
		Entries []struct{ Name string }
	}
	decode(call("list_files", map[string]any{"agent": agent}, false), &listing)
	found := false
	for _, e := range listing.Entries {
		found = found || e.Name == "notes.txt"
	}
	if !found {
		fail("list_files: %+v", listing)
	}
	var search struct {
		Matches []struct {
			Path string
			Line int
			Text string
		}
	}
	decode(call("search_files", map[string]any{"agent": agent, "pattern": "needle"}, false), &search)
	if len(search.Matches) != 1 || search.Matches[0].Path != "notes.txt" || search.Matches[0].Line != 2 {
		fail("search_files: %+v", search)
	}
	fmt.Println("write_file, read_file, list_files, search_files: ok")

	templates, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 1 ||
		templates.ResourceTemplates[0].URITemplate != "agenthold://agents/{agent}/files/{path}" {
		fail("resources/templates/list: %v %+v", err, templates)
	}
	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		fail("resources/list: %v", err)
	}
	home := "agenthold://agents/" + agent + "/files/"
	found = false
	for _, r := range res.Resources {
		found = found || r.URI == home
	}
	if !found {
		fail("resources/list lacks %s: %+v", home, res.Resources)
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: home + "notes.txt"})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != "alpha\nneedle in a haystack\n" {
		fail("resources/read: %v %+v", err, read)
	}
	read, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: home})
	if err != nil || !strings.Contains(read.Contents[0].Text, "notes.txt") || read.Contents[0].MIMEType != "application/json" {
		fail("resources/read of the home: %v %+v", err, read)
	}
	call("write_file", map[string]any{"agent": agent, "path": "raw.bin", "content": "/wAB", "encoding": "base64"}, false)
	read, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: home + "raw.bin"})
	if err != nil || string(read.Contents[0].Blob) != "\xff\x00\x01" {
		fail("resources/read of bytes: %v %+v", err, read)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: home + "missing"}); err == nil {
		fail("resources/read of a missing file answered")
	}
	fmt.Println("resources: ok")

	// The SDK's view of a refused read: a JSON-RPC error, its code and
	// its data {uri, status}.
	refused := func(uri string, code int64, status int) *jsonrpc.Error {
		r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			fail("resources/read %s: want JSON-RPC error %d, got %v %+v", uri, code, err, r)
		}
		var data struct {
			URI    string
			Status int
		}
		if we.Code != code || (status != 0 && (json.Unmarshal(we.Data, &data) != nil || data.Status != status ||
			data.URI != uri)) {
			fail("resources/read %s: want %d (status %d), got %d %q %s", uri, code, status, we.Code, we.Message, we.Data)
		}
		return we
	}
	for _, r := range res.Resources {
		if !strings.HasPrefix(r.URI, "agenthold://agents/") || !strings.HasSuffix(r.URI, "/files/") || r.Name == "" {
			fail("resources/list: %+v", r)
		}
		if r.URI == "agenthold://agents/"+other+"/files/" || r.Name == other {
			fail("resources/list shows another tenant's agent: %+v", r)
		}
	}
	// Binary: every byte value, written by the tool, read as a blob.
	all := make([]byte, 1024)
	for i := range all {
		all[i] = byte(i)
	}
	call("write_file", map[string]any{"agent": agent, "path": "all.bin", "content": base64.StdEncoding.EncodeToString(all),
		"encoding": "base64"}, false)
	read, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: home + "all.bin"})
	if err != nil || len(read.Contents) != 1 || !bytes.Equal(read.Contents[0].Blob, all) || read.Contents[0].Text != "" ||
		read.Contents[0].URI != home+"all.bin" {
		fail("resources/read of every byte value: %v %+v", err, read)
	}
	// The 8 MiB cap, the read_file tool's: 8 MiB read whole, one byte more refused.
	call("exec", map[string]any{"agent": agent, "cmd": "head -c 8388608 /dev/zero | tr '\\000' '\\377' > cap.bin && " +
		"cp cap.bin over.bin && printf x >> over.bin"}, false)
	read, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: home + "cap.bin"})
	if err != nil || len(read.Contents) != 1 || len(read.Contents[0].Blob) != 8<<20 ||
		!bytes.Equal(read.Contents[0].Blob, bytes.Repeat([]byte{0xff}, 8<<20)) {
		fail("resources/read of 8 MiB: %v", err)
	}
	if we := refused(home+"over.bin", jsonrpc.CodeInternalError, 413); !strings.Contains(we.Message, "8 MiB") {
		fail("resources/read over 8 MiB: %q", we.Message)
	}
	if r := call("read_file", map[string]any{"agent": agent, "path": "over.bin"}, true); !strings.HasPrefix(text(r), "413") {
		fail("read_file over 8 MiB: %s", text(r))
	}
	// Hostile paths and agents: the route's 400, nothing read.
	for _, uri := range []string{home + "../../etc/passwd", home + "%2E%2E/%2E%2E/etc/passwd", home + "/etc/passwd",
		home + "a%00b", "agenthold://agents/../files/etc/passwd", "agenthold://agents/%2E%2E/files/x"} {
		refused(uri, jsonrpc.CodeInvalidParams, 400)
	}
	for _, uri := range []string{"file:///etc/passwd", "agenthold://agents/" + agent, home + "%zz"} {
		refused(uri, jsonrpc.CodeInvalidParams, 0)
	}
	// Another tenant's agent, holding secret.txt: the same not-found as
	// an agent that does not exist, by the tool and as a resource.
	theirs := refused("agenthold://agents/"+other+"/files/secret.txt", -32002, 404)
	none := refused("agenthold://agents/nosuchagent/files/secret.txt", -32002, 404)
	if !strings.Contains(theirs.Message, other) ||
		strings.ReplaceAll(theirs.Message, other, "X") != strings.ReplaceAll(none.Message, "nosuchagent", "X") {
		fail("another tenant's agent is not the same as none: %q vs %q", theirs.Message, none.Message)
	}
	refused("agenthold://agents/"+other+"/files/", -32002, 404)
	if r := call("read_file", map[string]any{"agent": other, "path": "secret.txt"}, true); !strings.HasPrefix(text(r), "404") {
		fail("read_file of another tenant's agent: %s", text(r))
	}
	fmt.Println("resources refused: ok")

	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil ||
		!strings.Contains(err.Error(), "no_such_tool") {
		fail("an unknown tool: %v", err)
	}
	if r := call("read_file", map[string]any{"agent": agent, "path": "../../etc/passwd"}, true); !strings.HasPrefix(text(r), "400") {
		fail("a path out of the home: %s", text(r))
	}
	fmt.Println("errors: ok")
	fmt.Println("goclient: all checks passed")
}
