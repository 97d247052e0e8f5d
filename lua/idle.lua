-- idle.lua: idle(sandbox, facts) says whether a running sandbox may be put
-- to sleep now, and if not, when it would be at the earliest.
--
-- The reference rule: a sandbox is idle when, for idle_minutes, no turn has
-- been running, no terminal has been open, nothing has used it, and its
-- processes have used less than 5% of one CPU core.
--
-- sandbox: { id, name, state, ... }             (what the sleeper knows)
-- facts:   { now_ms, last_activity_ms, idle_minutes, turns, terminals,
--            conversation_turns, cpu_share }   turns, terminals and
--                          conversation_turns (prompts the harness is
--                          answering) are counts; cpu_share is the
--                          fraction of one core used since the last check
--                          (nil when unknown)
--
-- Returns { idle = bool, sleeps_at_ms = int, why = "turn" | "terminal" |
-- "cpu" | "recent use" | "idle", recheck_cpu_share = number? }.
-- sleeps_at_ms is when it would sleep if nothing more happened (now, when
-- idle): the sleeper does not ask again before then unless a fact changes
-- (a turn, a terminal, activity, entering running). recheck_cpu_share says
-- which new CPU shares count as a change: those at or above it. Without
-- it, every new CPU sample (every 30 s) has the sandbox asked about again.

local CPU_THRESHOLD = 0.05

function idle(sandbox, facts)
  local now = math.tointeger(facts.now_ms) or math.floor(facts.now_ms or os.time() * 1000)
  local minutes = facts.idle_minutes or (sandbox and sandbox.idle_minutes) or 15
  local window = math.floor(minutes * 60000 + 0.5)
  local busy_until = now + window

  local recheck = CPU_THRESHOLD
  if (facts.turns or 0) + (facts.conversation_turns or 0) > 0 then
    return { idle = false, sleeps_at_ms = busy_until, why = "turn", recheck_cpu_share = recheck }
  end
  if (facts.terminals or 0) > 0 then
    return { idle = false, sleeps_at_ms = busy_until, why = "terminal", recheck_cpu_share = recheck }
  end
  if (facts.cpu_share or 0) >= CPU_THRESHOLD then
    return { idle = false, sleeps_at_ms = busy_until, why = "cpu", recheck_cpu_share = recheck }
  end
  local last = math.tointeger(facts.last_activity_ms) or 0
  if now - last < window then
    return { idle = false, sleeps_at_ms = last + window, why = "recent use", recheck_cpu_share = recheck }
  end
  return { idle = true, sleeps_at_ms = now, why = "idle", recheck_cpu_share = recheck }
end
