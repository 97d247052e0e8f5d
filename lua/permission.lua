-- permission.lua: permission(request) decides a harness's permission
-- request (ACP session/request_permission) when nobody answers it
-- (docs/conversations.md, docs/policy.md). The conversations actor asks it
-- as soon as the harness asks (an answer by the API is not built yet), and
-- the conversation's log says who decided: "policy", with the reason.
--
-- request: { agent_id, agent_name, tenant, conversation,
--            tool_kind  (ACP's ToolKind: "read", "edit", "delete", "move",
--                        "search", "execute", "think", "fetch", "other";
--                        "" when the harness named none),
--            title      (the tool call's title, "" when none),
--            path       (its first location's path, "" when none) }
-- Returns { allow = true|false, why = "..." }. The actor then answers
-- with the first option of kind allow_once (else allow_always) when
-- allow, else reject_once (else reject_always); "cancelled" when the
-- harness offered no such option. A script that fails leaves the
-- request to the compiled rule, which is this one's.
--
-- The shipped rule: allow reads, reject the rest.
function permission(request)
  if request.tool_kind == "read" then
    return { allow = true, why = "reads are allowed" }
  end
  local kind = request.tool_kind
  if kind == nil or kind == "" then kind = "of no kind" else kind = "'" .. kind .. "'" end
  return { allow = false, why = "only reads are allowed; this tool call is " .. kind }
end
