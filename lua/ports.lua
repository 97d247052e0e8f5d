-- ports.lua: decide(tenant, agent, port) decides whether a port the
-- tenant marked public (PUT /api/v1/agents/{agent}/ports/{port}
-- {"public": true}, docs/ports.md "Public ports") may be opened by anyone,
-- with no token, no cookie and no link, at /p/{agent_id}/{port}/public/.
-- It is asked on each such request, only for a port marked public. The
-- holder is the API; an edited file applies within a second (the policy
-- host's file check, docs/policy.md).
--
-- tenant: { name }
-- agent:  { id, name }
-- port:   { number (1..65535) }
--
-- Returns { allow = true|false, why = "..." }: `why` goes to the server's
-- log (debug level) when refused; the client gets the 403 of an invalid
-- link whatever the reason. A script that fails refuses.
--
-- The shipped rule: private. No port is opened to anyone, marked public
-- or not: an installation that wants public ports writes its rule here,
-- for instance
--
--   if port.number >= 8000 and port.number < 9000 then
--     return { allow = true, why = "public: 8000-8999 on this server" }
--   end
function decide(tenant, agent, port)
  return { allow = false,
           why = "ports.lua: public ports are off on this server (the shipped rule: private); port "
                 .. tostring(port.number) .. " of agent '" .. agent.name .. "' of tenant '"
                 .. tenant.name .. "' needs a link or the tenant's token" }
end
