module agenthold.test/acp-example-agent

go 1.24

tool github.com/coder/acp-go-sdk/example/agent

require github.com/coder/acp-go-sdk v0.13.0 // indirect
