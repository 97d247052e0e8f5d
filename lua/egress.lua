-- egress.lua: decide(tenant, agent, runtime, target) decides each
-- connection a sandbox asks its egress proxy for (docs/egress.md), before
-- the server resolves the name. The holder is the tunnel's egress side;
-- edits, SIGHUP and POST /policy/reload reach it as they reach the other
-- scripts (docs/policy.md), and apply to the next connection.
--
-- tenant:  { name }
-- agent:   { id, name }
-- runtime: { name, needs_network (bool) }
-- target:  { host        (lower case, no trailing dot; an IP literal as text),
--            port        (1..65535),
--            literal     (true: host is an IP address),
--            kind        ("connect" or "http"),
--            runtime_entry (the first entry of the runtime's catalog `egress`
--                           list that matches host and port, "" none),
--            allow_entry   (the same in the tenant's allow list),
--            deny_entry    (the same in the tenant's deny list) }
-- The entries are matched by the server (proto/egress.c: `name`, `*.name`,
-- `*`, an address or range, each with an optional `:port`), so the rule
-- and the address check read lists the same way.
--
-- Returns { allow = true|false, why = "...", rule = "..." }: `why` is
-- the sentence the agent's client reads in the 403 body and the audit
-- keeps; `rule` names the rule that decided. Whatever this returns, the
-- server then resolves the name itself and refuses loopback, private,
-- link-local, metadata and its own addresses (any of them among what the
-- name resolved to refuses the request), unless an entry of the tenant's
-- allow list or the runtime's list naming that address or range holds
-- it; a deny entry naming one refuses it (docs/egress.md, "The address
-- check"). A script that fails refuses (the compiled rule: nothing goes
-- out), and the log says why.
--
-- The shipped rule: a runtime without needs_network gets nothing; the
-- tenant's deny list wins; then the runtime's list or the tenant's allow
-- list lets it through; anything else is refused.
function decide(tenant, agent, runtime, target)
  local where = target.host .. ":" .. tostring(target.port)
  if not runtime.needs_network then
    return { allow = false, rule = "needs_network",
             why = "egress refused: runtime '" .. runtime.name .. "' has no needs_network "
                   .. "in the catalog, so it gets no way out (" .. where .. ")" }
  end
  if target.deny_entry ~= "" then
    return { allow = false, rule = "tenant deny",
             why = "egress refused: " .. where .. " is on tenant '" .. tenant.name
                   .. "''s deny list (entry '" .. target.deny_entry .. "')" }
  end
  if target.runtime_entry ~= "" then
    return { allow = true, rule = "runtime egress",
             why = "allowed by runtime '" .. runtime.name .. "''s egress list (entry '"
                   .. target.runtime_entry .. "')" }
  end
  if target.allow_entry ~= "" then
    return { allow = true, rule = "tenant allow",
             why = "allowed by tenant '" .. tenant.name .. "''s allow list (entry '"
                   .. target.allow_entry .. "')" }
  end
  return { allow = false, rule = "no entry",
           why = "egress refused: " .. where .. " is on neither runtime '" .. runtime.name
                 .. "''s egress list nor tenant '" .. tenant.name .. "''s allow list" }
end
