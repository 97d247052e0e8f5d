-- idle.lua: idle(sandbox, facts) is the idle ladder: whether a running
-- sandbox may be put down now (frozen first, where the driver can pause;
-- else stopped), whether a frozen one has been frozen long enough to be
-- stopped (sleeping), and if not, when that would be at the earliest.
--
-- The reference rule: a sandbox is idle when, for idle_minutes, no turn has
-- been running, no terminal has been open, nothing has used it, and its
-- processes have used less than 5% of one CPU core. An idle sandbox is
-- frozen (its processes paused, its memory kept: a use thaws it in
-- milliseconds); freeze_minutes after it was frozen it is stopped, as an
-- idle one always was before the frozen tier. freeze_minutes 0, or a
-- driver without a pause (kubernetes), skips frozen: an idle sandbox is
-- stopped at once.
--
-- sandbox: { id, name, tenant, state, idle_minutes }   (what the sleeper knows)
-- facts:   { now_ms, last_activity_ms, idle_minutes, turns, terminals,
--            conversation_turns, cpu_share, state ("running" | "frozen"),
--            frozen_at_ms (when frozen), can_freeze (bool: the driver
--            can pause), freeze_minutes (sandbox.freeze_minutes) }  turns, terminals and conversation_turns
--                          (prompts the harness is answering) are counts;
--                          cpu_share is the fraction of one core used
--                          since the last check (nil when unknown)
--
-- Returns { idle = bool, action = "freeze" | "stop", sleeps_at_ms = int,
-- stops_at_ms = int, why = "turn" | "terminal" | "cpu" | "recent use" |
-- "idle" | "frozen", recheck_cpu_share = number? }.
-- idle says the action is due now. For a running sandbox sleeps_at_ms is
-- when it would be put down (frozen, or stopped) if nothing more happened
-- (now, when idle); for a frozen one, when it is stopped. stops_at_ms is
-- when it would be stopped. The sleeper does not ask again before
-- sleeps_at_ms unless a fact changes (a turn, a terminal, activity,
-- entering running or frozen). recheck_cpu_share says which new CPU
-- shares count as a change: those at or above it. Without it, every new
-- CPU sample (every 30 s) has the sandbox asked about again.

local CPU_THRESHOLD = 0.05

-- How long an idle sandbox stays frozen before it is stopped: the
-- server's sandbox.freeze_minutes (shipped default 10; facts.freeze_minutes),
-- 10 when not said. Per agent or tenant: change it here, e.g.
--   if sandbox.tenant == "batch" then return 0 end   -- never frozen
function freeze_minutes(sandbox, facts)
  return facts.freeze_minutes or 10
end

local function window_ms(minutes)
  return math.floor(minutes * 60000 + 0.5)
end

function idle(sandbox, facts)
  local now = math.tointeger(facts.now_ms) or math.floor(facts.now_ms or os.time() * 1000)
  local minutes = facts.idle_minutes or (sandbox and sandbox.idle_minutes) or 15
  local window = window_ms(minutes)
  local fm = freeze_minutes(sandbox, facts) or 0
  local freezes = facts.can_freeze ~= false and fm > 0
  local frozen_for = freezes and window_ms(fm) or 0
  local action = freezes and "freeze" or "stop"
  local recheck = CPU_THRESHOLD

  if facts.state == "frozen" then
    -- Frozen: nothing in it runs, so only time counts (a use thaws it,
    -- and then it is running again).
    local since = math.tointeger(facts.frozen_at_ms) or now
    local stops = since + window_ms(fm > 0 and fm or 0)
    return { idle = now >= stops, action = "stop", sleeps_at_ms = stops, stops_at_ms = stops,
             why = "frozen" }
  end

  local function awake(at, why)
    return { idle = false, action = action, sleeps_at_ms = at, stops_at_ms = at + frozen_for,
             why = why, recheck_cpu_share = recheck }
  end
  local busy_until = now + window
  if (facts.turns or 0) + (facts.conversation_turns or 0) > 0 then
    return awake(busy_until, "turn")
  end
  if (facts.terminals or 0) > 0 then
    return awake(busy_until, "terminal")
  end
  if (facts.cpu_share or 0) >= CPU_THRESHOLD then
    return awake(busy_until, "cpu")
  end
  local last = math.tointeger(facts.last_activity_ms) or 0
  if now - last < window then
    return awake(last + window, "recent use")
  end
  return { idle = true, action = action, sleeps_at_ms = now, stops_at_ms = now + frozen_for,
           why = "idle", recheck_cpu_share = recheck }
end
