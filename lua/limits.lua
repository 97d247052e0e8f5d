-- limits.lua: admit(request, limits) decides whether a sandbox may be
-- created or changed with the resources asked for, and fills in defaults.
--
-- request: { op = "create" | "update", name, image, cpus, memory_mb,
--            idle_minutes }                      (absent fields are nil)
-- limits:  { default_image, default_cpus, default_memory_mb, max_cpus,
--            max_memory_mb, default_idle_minutes }  (from the configuration)
--
-- Returns { allow = true, image =, cpus =, memory_mb =, idle_minutes = }:
-- for "create" every field is filled (defaults where the request named
-- none); for "update" only the fields the request named (nil = keep).
-- Or { allow = false, message = "..." }: a sentence for the person who
-- asked, naming the value and the limit (and the configuration key).

-- 12 -> "12", 0.5 -> "0.5" (Lua prints 12.0 for a float)
local function num(n)
  if math.type(n) == "float" and n == math.floor(n) and math.abs(n) < 2^53 then
    return string.format("%d", math.tointeger(n))
  end
  return tostring(n)
end

local function deny(fmt, ...)
  return { allow = false, message = string.format(fmt, ...) }
end

function admit(request, limits)
  local op = request.op or "create"
  if op ~= "create" and op ~= "update" then
    return deny("unknown operation '%s' (wanted create or update)", tostring(op))
  end
  local creating = op == "create"
  local out = { allow = true }

  -- image: a plausible reference; the driver finds out whether it exists
  local image = request.image
  if image == nil and creating then image = limits.default_image end
  if image ~= nil then
    if type(image) ~= "string" or image == "" then
      return deny("image must be a non-empty image reference")
    end
    if #image > 255 or image:find("%s") then
      return deny("image '%s' is not a valid image reference", image:sub(1, 80))
    end
    out.image = image
  end

  local cpus = request.cpus
  if cpus == nil and creating then cpus = limits.default_cpus end
  if cpus ~= nil then
    if type(cpus) ~= "number" or cpus ~= cpus then
      return deny("cpus must be a number")
    end
    if cpus <= 0 then
      return deny("cpus %s must be more than 0", num(cpus))
    end
    if cpus > limits.max_cpus then
      return deny("cpus %s is over the limit of %s (sandbox.max_cpus)", num(cpus), num(limits.max_cpus))
    end
    out.cpus = cpus + 0.0        -- a double, as the store keeps it
  end

  local memory = request.memory_mb
  if memory == nil and creating then memory = limits.default_memory_mb end
  if memory ~= nil then
    if type(memory) ~= "number" or math.tointeger(memory) == nil then
      return deny("memory_mb must be a whole number of MiB")
    end
    memory = math.tointeger(memory)
    if memory < 6 then
      return deny("memory_mb %d is under the minimum of 6", memory)
    end
    if memory > limits.max_memory_mb then
      return deny("memory_mb %d is over the limit of %s (sandbox.max_memory_mb)",
                  memory, num(limits.max_memory_mb))
    end
    out.memory_mb = memory
  end

  local idle = request.idle_minutes
  if idle == nil and creating then idle = limits.default_idle_minutes end
  if idle ~= nil then
    if type(idle) ~= "number" or idle ~= idle then
      return deny("idle_minutes must be a number")
    end
    if idle <= 0 then
      return deny("idle_minutes %s must be more than 0", num(idle))
    end
    if idle > 525600 then
      return deny("idle_minutes %s is over a year", num(idle))
    end
    out.idle_minutes = idle + 0.0
  end
  return out
end
