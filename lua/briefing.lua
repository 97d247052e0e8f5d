-- briefing.lua: briefing(runtime) writes the paragraph an agent is told
-- about the runtime its sandbox runs.
--
-- runtime: { name, image, description, tools }   (tools: a list of names)
-- Returns { text = "..." }.

local function sentence(s)
  s = (s or ""):gsub("^%s+", ""):gsub("%s+$", "")
  if s ~= "" and not s:find("[%.!?]$") then s = s .. "." end
  return s
end

function briefing(runtime)
  local parts = {}
  parts[#parts + 1] = string.format("You are working in a sandbox running the %s runtime (image %s).",
                                    runtime.name or "unnamed", runtime.image or "unknown")
  local description = sentence(runtime.description)
  if description ~= "" then parts[#parts + 1] = description end
  local tools = runtime.tools
  if type(tools) == "table" and #tools > 0 then
    parts[#parts + 1] = "Tools at hand: " .. table.concat(tools, ", ") .. "."
  elseif type(tools) == "string" and tools ~= "" then
    parts[#parts + 1] = "Tools at hand: " .. tools .. "."
  end
  parts[#parts + 1] = "Your home directory, /home/agent, is yours and persists when the sandbox"
    .. " sleeps, wakes or is rebuilt; everything outside it comes from the image and may be"
    .. " reset by a rebuild, so keep your work under /home/agent."
  parts[#parts + 1] = "The sandbox falls asleep when it has been idle for a while and wakes"
    .. " when it is used again."
  return { text = table.concat(parts, " ") }
end
