-- limits.lua: admit(tenant, request, usage, limits) decides whether a
-- sandbox may be created, started or changed, and fills in defaults.
-- Edit it while the server runs: the next decision uses the new version
-- (a version that does not load leaves the previous one in force, and
-- `agenthold policy status` says why).
--
-- tenant:  { name, max_sandboxes, max_running, max_cpus, max_memory_mb }
--          the limits an admin set on the tenant (nil: none set; the
--          server-wide ones below apply)
-- request: { op = "create" | "start" | "update", name, image, cpus,
--            memory_mb, idle_minutes, current_image, current_cpus,
--            current_memory_mb }       (absent fields are nil; current_*:
--                                       what the agent holds, start/update)
-- usage:   what the tenant holds now, the asking agent left out:
--          { sandboxes, running, cpus, memory_mb,
--            pool_sandboxes, pool_running, pool_cpus, pool_memory_mb }
--          (pool_*: every tenant together); sandboxes: every one kept,
--          asleep too; running: those that hold CPU and memory on the
--          host (creating, starting, running, rebuilding)
-- limits:  the configuration, as PUT /api/v1/policy changed it:
--          { default_image, default_cpus, default_memory_mb, max_cpus,
--            max_memory_mb, default_idle_minutes, tenant_max_sandboxes,
--            pool_max_sandboxes, tenant_max_running, pool_max_running }
--          (a *_max_* of 0 means no limit)
--
-- Returns { allow = true, image =, cpus =, memory_mb =, idle_minutes = }:
-- for "create" every field is filled (defaults where the request named
-- none); for "update" only the fields the request named (nil = keep); for
-- "start" nothing needs filling. Or { allow = false, message = "..." }: a
-- sentence for the person who asked, naming the value and the limit.

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

-- The tenant's own limit when an admin set one, else the server's; 0 or
-- nil: no limit. Also the limit's name, for the sentence.
local function cap(own, own_name, server, server_name)
  local v, name = own, own_name
  if v == nil then v, name = server, server_name end
  if v == nil or v <= 0 then return nil end
  return v, name
end

-- Places, in the seed's sentence ("already holds 10 of 10"), each naming
-- its cap. Two caps count what holds the host, the sandboxes running (or
-- on their way: creating, starting, rebuilding): the tenant's and the
-- pool's (the seed's SANDBOXD_MAX_SESSIONS_PER_TENANT, 10, within
-- SANDBOXD_MAX_SESSIONS, 20). Two much larger ones count every sandbox
-- kept, asleep too (a home on disk, a row): the tenant's and the pool's.
local function places(tenant, request, usage, limits)
  local op = request.op
  if op == "create" then
    local most, name = cap(tenant.max_sandboxes, "its max_sandboxes",
                           limits.tenant_max_sandboxes, "limits.tenant_max_sandboxes")
    if most and usage.sandboxes >= most then
      return deny("tenant '%s' already holds %d of %d kept sandboxes, asleep or not (%s)",
                  tenant.name, usage.sandboxes, most, name)
    end
    local pool = cap(nil, nil, limits.pool_max_sandboxes)
    if pool and usage.pool_sandboxes >= pool then
      return deny("the pool already holds %d of %d kept sandboxes (every tenant together: "
                  .. "limits.pool_max_sandboxes)", usage.pool_sandboxes, pool)
    end
  end
  -- a create starts the sandbox it makes: it takes a running place too;
  -- a start is a wake as well (a turn, a terminal, a session)
  if op == "start" or op == "create" then
    local most, name = cap(tenant.max_running, "its max_running",
                           limits.tenant_max_running, "limits.tenant_max_running")
    if most and usage.running >= most then
      return deny("tenant '%s' already holds %d of %d running sandboxes (%s); "
                  .. "stop one, or let one go to sleep, first", tenant.name, usage.running, most, name)
    end
    local pool = cap(nil, nil, limits.pool_max_running)
    if pool and usage.pool_running >= pool then
      return deny("the pool already holds %d of %d running sandboxes (every tenant together: "
                  .. "limits.pool_max_running)", usage.pool_running, pool)
    end
  end
  return nil
end

-- Resources: what the tenant would hold in cpus and memory.
local function resources(tenant, out, request, usage)
  local cpus = out.cpus or request.current_cpus or 0
  local memory = out.memory_mb or request.current_memory_mb or 0
  local max_cpus = cap(tenant.max_cpus, nil)
  if max_cpus and usage.cpus + cpus > max_cpus then
    return deny("tenant '%s' would hold %s cpus, over its limit of %s", tenant.name,
                num(usage.cpus + cpus), num(max_cpus))
  end
  local max_memory = cap(tenant.max_memory_mb, nil)
  if max_memory and usage.memory_mb + memory > max_memory then
    return deny("tenant '%s' would hold %s MiB, over its limit of %s MiB", tenant.name,
                num(usage.memory_mb + memory), num(max_memory))
  end
  return nil
end

function admit(tenant, request, usage, limits)
  local op = request.op or "create"
  if op ~= "create" and op ~= "update" and op ~= "start" then
    return deny("unknown operation '%s' (wanted create, start or update)", tostring(op))
  end
  local refused = places(tenant, request, usage, limits)
  if refused then return refused end
  if op == "start" then
    return resources(tenant, {}, request, usage) or { allow = true }
  end
  local creating = op == "create"
  local out = { allow = true }

  -- image: a reference the server's grammar already checked; the driver
  -- finds out whether it exists
  local image = request.image
  if image == nil and creating then image = limits.default_image end
  if image ~= nil then out.image = image end

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
  return resources(tenant, out, request, usage) or out
end
