-- pool.lua: size(runtime, clock) says how many warm sandboxes the
-- runtime's pool keeps ready (docs/lifecycle.md "Warm pools", issue 31).
-- A warm sandbox is made and started ahead of any create, belongs to no
-- tenant, and counts against no tenant's limits; a create of that
-- runtime in the pool's shape (the default cpus, and the runtime's memory
-- or the default) takes one and is `running` at once. Every pool
-- together is held to sandbox.warm_pool_max (docs/configuration.md),
-- filled in catalog order. The holder is lifecycle; it asks every second,
-- and an edited file applies at the next ask (the policy host's file
-- check, docs/policy.md).
--
-- runtime: { alias, image, default (true for the catalog's first entry) }
-- clock:   { hour (0..23), minute, weekday (0 Sunday) }, UTC
--
-- Returns { size = n, frozen = true|false }: n from 0; above
-- sandbox.warm_pool_max is cut to it. A script that fails keeps no warm
-- sandbox (the failure is logged). A pool made smaller loses its newest
-- warm sandboxes at the next ask.
--
-- frozen = true keeps the pool's warm sandboxes frozen once they are
-- ready (the driver's freeze, Docker's pause, as the idle ladder's frozen
-- state): a pool then costs no CPU, only memory. A create that takes one
-- is answered running once it is thawed (one Docker unpause: about 16 ms
-- on a quiet machine here, 67 to 130 ms under a load of 9; bench/README.md
-- "create"); a running warm sandbox needs none. A driver that cannot
-- freeze (kubernetes) keeps them running whatever this says; a freeze
-- that fails (a hostd that cannot) leaves them running. false (or
-- absent): they run.
--
-- The shipped rule: two warm sandboxes of the default runtime, frozen,
-- none of the others. A rule for a time of day, for instance:
--
--   if runtime.default and clock.hour >= 7 and clock.hour < 19 then
--     return { size = 6 }          -- running: no thaw for the first command
--   end
function size(runtime, clock)
  if runtime.default then
    return { size = 2, frozen = true }
  end
  return { size = 0 }
end
