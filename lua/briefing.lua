-- briefing.lua: briefing(runtime) writes what an agent is told about the
-- runtime its sandbox runs. The server composes it from the catalog entry
-- (catalog/runtimes.json) and delivers it with the agent: GET
-- /api/v1/agents/{agent}/briefing, `agenthold show`, and read-only inside
-- the sandbox as /etc/agenthold/briefing.md. Only runtimes of this
-- deployment's catalog are described: there is no paragraph for any other.
--
-- runtime: { alias, name (the alias), image, base_image (nil for an image
--            entry), description, setup_commands = { ... }, packages = { ... },
--            env_vars = { NAME, ... } (names only), briefing = { sentences },
--            needs_network (boolean), egress_proxy (true: a network is reached
--            through sandboxd's egress proxy alone, docs/egress.md),
--            egress = { the catalog entry's allowed hosts },
--            mem_limit_mb (nil: the server's default) }
-- Returns { text = "..." } (Markdown).

local function sentence(s)
  s = (s or ""):gsub("^%s+", ""):gsub("%s+$", "")
  if s ~= "" and not s:find("[%.!?:]$") then s = s .. "." end
  return s
end

local function list(t)
  if type(t) ~= "table" then return {} end
  return t
end

-- What a setup command installed: the package names after "apt-get
-- install", "apt install", "apk add" or "dnf/yum install", options and
-- shell syntax left out; these are the tools the agent finds at hand.
local friendly = { ["ripgrep"] = "ripgrep (rg)", ["python3-pip"] = "pip", ["python3-venv"] = "venv",
                   ["ca-certificates"] = false, ["xz-utils"] = "xz", ["procps"] = "procps (ps, top)" }

local function tools_from(setup)
  local tools, seen = {}, {}
  for _, cmd in ipairs(list(setup)) do
    for segment in (cmd .. "&&"):gmatch("(.-)[;&|]+") do
      local words = {}
      for w in segment:gmatch("%S+") do words[#words + 1] = w end
      local start
      for i = 1, #words - 1 do
        local a, b = words[i], words[i + 1]
        if ((a == "apt-get" or a == "apt" or a == "dnf" or a == "yum") and b == "install")
           or (a == "apk" and b == "add") then
          start = i + 2
        end
      end
      if start then
        for i = start, #words do
          local w = words[i]
          if not w:find("^%-") and not w:find("=") and w:find("^[%w][%w.+%-]*$") and not seen[w] then
            seen[w] = true
            local name = friendly[w]
            if name == nil then name = w end
            if name then tools[#tools + 1] = name end
          end
        end
      end
    end
  end
  return tools
end

function briefing(runtime)
  local alias = runtime.alias or runtime.name or "unnamed"
  local parts = {}
  parts[#parts + 1] = string.format("# Your sandbox: the %s runtime", alias)
  local about = sentence(runtime.description)
  if about ~= "" then parts[#parts + 1] = about end

  local facts = {}
  local tools = tools_from(runtime.setup_commands)
  if #tools > 0 then
    facts[#facts + 1] = "- Installed: " .. table.concat(tools, ", ") .. "."
  end
  local packages = list(runtime.packages)
  if #packages > 0 then
    facts[#facts + 1] = "- Python packages (pip): " .. table.concat(packages, ", ") .. "."
  end
  local env = list(runtime.env_vars)
  if #env > 0 then
    facts[#facts + 1] = "- Set in your environment: " .. table.concat(env, ", ") .. "."
  end
  if runtime.needs_network and runtime.egress_proxy then
    local hosts = list(runtime.egress)
    facts[#facts + 1] = "- Network: out through agenthold's proxy only (HTTP_PROXY and HTTPS_PROXY"
      .. " are set, and curl, pip, git and npm use them; names are resolved by agenthold, there is"
      .. " no DNS in the sandbox). Allowed: "
      .. (#hosts > 0 and (table.concat(hosts, ", ") .. ", and what your tenant allows") or "what your tenant allows")
      .. "; any other host is refused with 403 and a sentence naming the rule."
  elseif runtime.needs_network then
    facts[#facts + 1] = "- Network: you can reach the outside world from the sandbox."
  else
    facts[#facts + 1] = "- Network: none beyond the agenthold server; downloads will fail."
  end
  if runtime.mem_limit_mb then
    facts[#facts + 1] = string.format("- Memory: %d MB.", runtime.mem_limit_mb)
  end
  local has = {}
  for _, t in ipairs(tools) do has[t:match("^(%S+)")] = true end
  if has["libreoffice"] or has["libreoffice-core"] or has["libreoffice-writer-nogui"]
     or has["libreoffice-nogui"] then
    facts[#facts + 1] = "- LibreOffice, headless: `soffice --headless --convert-to pdf FILE` turns"
      .. " documents, spreadsheets and presentations (docx, odt, rtf, xlsx, ods, csv, pptx, odp)"
      .. " into PDF, and `--convert-to docx|xlsx|csv|odt` converts between their formats."
  end
  -- The one gap of a runtime without a compiler (seed 004: no build-essential).
  if not (has["build-essential"] or has["gcc"] or has["clang"] or has["tcc"]) then
    facts[#facts + 1] = "- No C compiler: nothing here builds native code from source, so"
      .. " install packages that ship ready-made (wheels) rather than ones that compile."
  end
  if #facts > 0 then parts[#parts + 1] = table.concat(facts, "\n") end

  parts[#parts + 1] = "Your home directory, /home/agent, is yours and persists when the sandbox"
    .. " sleeps, wakes or is rebuilt; everything outside it comes from the image and is"
    .. " reset by a rebuild, so keep your work under /home/agent. /tmp is yours to use"
    .. " but is not kept. The sandbox falls asleep when it has been idle for a while and"
    .. " wakes when it is used again."

  -- How to work here (seed 004's working instructions).
  local how = {
    "## How to work here",
    "- Commands run under POSIX `/bin/sh`, each as a new process: variables and `cd` do not"
      .. " carry over from one command to the next, so chain what belongs together"
      .. " (`cd dir && make`) or write a script.",
    "- Check each command's errors and exit status, and verify the files you made (`ls -l`,"
      .. " open or run them) before you report success.",
    "- Never read a large file whole: extract its text once, find what you need with"
      .. " `rg -n PATTERN FILE`, then read just those lines (`sed -n '400,460p' FILE`).",
  }
  if has["tesseract-ocr"] or has["tesseract"] then
    how[#how + 1] = "- OCR a range of pages (`pdftoppm -f 3 -l 5`, then `tesseract`), never a"
      .. " whole scan at once."
  end
  parts[#parts + 1] = table.concat(how, "\n")

  local said = {}
  for _, s in ipairs(list(runtime.briefing)) do
    s = sentence(s)
    if s ~= "" then said[#said + 1] = s end
  end
  if #said > 0 then parts[#parts + 1] = table.concat(said, " ") end
  return { text = table.concat(parts, "\n\n") .. "\n" }
end
