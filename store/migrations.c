/*  store/migrations.c: the schema, one numbered migration at a time.
    Append only: a released migration is never edited (databases in the
    field already ran it); a change is a new entry. Each one runs once,
    in its own transaction, and sets PRAGMA user_version to its number.
    docs/schema.md shows the same SQL and must stay identical to it.   */
#include "store/migrations.h"

static const char s_migration_1 [] =
    "CREATE TABLE agents (\n"
    "  id            TEXT PRIMARY KEY,          -- 12 lowercase hex characters\n"
    "  name          TEXT NOT NULL UNIQUE,      -- [a-z0-9][a-z0-9._-]{0,62}\n"
    "  tenant        TEXT NOT NULL DEFAULT 'default',\n"
    "  image         TEXT NOT NULL,             -- desired image\n"
    "  cpus          REAL NOT NULL,             -- desired resources\n"
    "  memory_mb     INTEGER NOT NULL,\n"
    "  idle_minutes  REAL NOT NULL,\n"
    "  created_at    INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE sandboxes (\n"
    "  agent_id         TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,\n"
    "  state            TEXT NOT NULL CHECK (state IN ('creating','starting','running','stopping',\n"
    "                     'sleeping','rebuilding','destroying','error')),\n"
    "  op               TEXT,                   -- operation in flight, or the one that failed\n"
    "  op_started_at    INTEGER,\n"
    "  error            TEXT,                   -- why, when state = 'error'\n"
    "  needs_rebuild    INTEGER NOT NULL DEFAULT 0,\n"
    "  image            TEXT NOT NULL,          -- what the sandbox was built from\n"
    "  cpus             REAL NOT NULL,\n"
    "  memory_mb        INTEGER NOT NULL,\n"
    "  last_activity_at INTEGER,\n"
    "  boot_token_hash  TEXT,                   -- hex SHA-256 of the current per-boot token\n"
    "  updated_at       INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE networks (                    -- docker driver subnet allocations\n"
    "  agent_id TEXT PRIMARY KEY,\n"
    "  subnet   TEXT NOT NULL UNIQUE            -- \"10.213.0.16/28\"\n"
    ");\n"
    "CREATE TABLE operations (                  -- audit trail: paths and commands, never contents\n"
    "  id       INTEGER PRIMARY KEY,\n"
    "  at       INTEGER NOT NULL,\n"
    "  agent_id TEXT,\n"
    "  actor    TEXT NOT NULL,                  -- who: \"api:<token name>\", \"sleeper\", ...\n"
    "  kind     TEXT NOT NULL,                  -- \"create\", \"start\", \"fs.write\", \"exec\", ...\n"
    "  detail   TEXT,                           -- a path or a command line\n"
    "  ok       INTEGER NOT NULL,\n"
    "  error    TEXT\n"
    ");\n"
    "CREATE INDEX operations_agent ON operations(agent_id, at);\n"
    "CREATE TABLE tombstones (                  -- destroys still owed to the driver\n"
    "  agent_id TEXT PRIMARY KEY,\n"
    "  at       INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE tenants (\n"
    "  name          TEXT PRIMARY KEY,\n"
    "  max_agents    INTEGER,\n"
    "  max_cpus      REAL,\n"
    "  max_memory_mb INTEGER\n"
    ");\n"
    "INSERT INTO tenants(name) VALUES ('default');\n"
    "CREATE TABLE api_tokens (\n"
    "  id         INTEGER PRIMARY KEY,\n"
    "  name       TEXT NOT NULL UNIQUE,\n"
    "  hash       TEXT NOT NULL UNIQUE,           -- hex SHA-256 of the token\n"
    "  tenant     TEXT NOT NULL DEFAULT 'default',\n"
    "  admin      INTEGER NOT NULL DEFAULT 0,\n"
    "  created_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE policy_status (                 -- written by each policy host (one per actor)\n"
    "  holder    TEXT NOT NULL,                   -- the actor: \"lifecycle\", \"sleeper\", \"builder\"\n"
    "  script    TEXT NOT NULL,                   -- \"limits.lua\"\n"
    "  loaded_at INTEGER,                         -- when the version in force was loaded\n"
    "  error     TEXT,                            -- why the last load failed (NULL: it did not)\n"
    "  error_at  INTEGER,\n"
    "  PRIMARY KEY (holder, script)\n"
    ");\n";

//  Migration 2 (sleep and wake): turns are leases an agent harness holds
//  while it works; sleep_forecast is the sleeper's latest verdict per
//  running sandbox. Both belong to the sleeper actor.
static const char s_migration_2 [] =
    "CREATE TABLE turns (\n"
    "  id         TEXT PRIMARY KEY,               -- 16 lowercase hex characters\n"
    "  agent_id   TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,\n"
    "  started_at INTEGER NOT NULL,\n"
    "  expires_at INTEGER NOT NULL,               -- the lease: renewed by the harness\n"
    "  ended_at   INTEGER                         -- NULL while it runs\n"
    ");\n"
    "CREATE INDEX turns_agent ON turns(agent_id, ended_at);\n"
    "CREATE INDEX operations_at ON operations(at);      -- the recorder's retention sweep\n"
    "CREATE TABLE sleep_forecast (\n"
    "  agent_id   TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,\n"
    "  sleeps_at  INTEGER,                        -- when it falls asleep if nothing else happens\n"
    "  why        TEXT,                           -- why it is awake: turn, terminal, cpu, recent use\n"
    "  checked_at INTEGER NOT NULL\n"
    ");\n";

//  Migration 3 (tenants, tokens and sessions): the tenant is the boundary.
//  Agent names are unique within a tenant (the table is rebuilt: SQLite
//  cannot drop a column's UNIQUE); tokens expire, are revoked and may act
//  for a person; a session names the sandbox of a conversation (or run,
//  channel, user, agent) without the caller storing our ids; the audit
//  trail keeps the tenant; policy_values hold what PUT /api/v1/policy
//  changes at run time.
static const char s_migration_3 [] =
    "CREATE TABLE agents_new (\n"
    "  id            TEXT PRIMARY KEY,          -- 12 lowercase hex characters\n"
    "  name          TEXT NOT NULL,             -- an agent name, unique within its tenant\n"
    "  tenant        TEXT NOT NULL DEFAULT 'default',\n"
    "  image         TEXT NOT NULL,             -- desired image\n"
    "  cpus          REAL NOT NULL,             -- desired resources\n"
    "  memory_mb     INTEGER NOT NULL,\n"
    "  idle_minutes  REAL NOT NULL,\n"
    "  created_at    INTEGER NOT NULL,\n"
    "  UNIQUE (tenant, name)\n"
    ");\n"
    "INSERT INTO agents_new (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at)\n"
    "  SELECT id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at FROM agents;\n"
    "DROP TABLE agents;\n"
    "ALTER TABLE agents_new RENAME TO agents;\n"
    "ALTER TABLE tenants ADD COLUMN max_running INTEGER;       -- sandboxes running at once\n"
    "ALTER TABLE tenants ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;\n"
    "INSERT OR IGNORE INTO tenants (name) SELECT DISTINCT tenant FROM agents;\n"
    "ALTER TABLE api_tokens ADD COLUMN user TEXT;              -- the person it acts for, NULL: none\n"
    "ALTER TABLE api_tokens ADD COLUMN expires_at INTEGER;     -- NULL: never\n"
    "ALTER TABLE api_tokens ADD COLUMN revoked_at INTEGER;\n"
    "ALTER TABLE api_tokens ADD COLUMN last_used_at INTEGER;\n"
    "ALTER TABLE sandboxes ADD COLUMN home_lost TEXT;       -- why its home is gone (NULL: it is there)\n"
    "ALTER TABLE operations ADD COLUMN tenant TEXT;\n"
    "CREATE INDEX operations_tenant ON operations(tenant, at);\n"
    "CREATE TABLE sessions (\n"
    "  id          TEXT PRIMARY KEY,            -- the reference: also the sandbox's name\n"
    "  tenant      TEXT NOT NULL,\n"
    "  backend     TEXT NOT NULL,               -- the calling platform (\"api\" by default)\n"
    "  scope       TEXT NOT NULL CHECK (scope IN ('run','conversation','channel','user','agent')),\n"
    "  host        TEXT NOT NULL,               -- where the subject lives on that platform\n"
    "  subject     TEXT NOT NULL,               -- the run, conversation, channel, user or agent\n"
    "  agent_id    TEXT,                        -- its sandbox (kept after it is gone)\n"
    "  created_at  INTEGER NOT NULL,\n"
    "  opened_at   INTEGER NOT NULL,\n"
    "  lost_at     INTEGER,                     -- its files are gone\n"
    "  lost_reason TEXT,\n"
    "  closed_at   INTEGER\n"
    ");\n"
    "CREATE UNIQUE INDEX sessions_key ON sessions(tenant, backend, scope, host, subject)\n"
    "  WHERE lost_at IS NULL AND closed_at IS NULL;\n"
    "CREATE TABLE policy_values (                -- changed at run time (PUT /api/v1/policy)\n"
    "  key        TEXT PRIMARY KEY,\n"
    "  value      REAL NOT NULL,\n"
    "  updated_at INTEGER NOT NULL\n"
    ");\n";

static const char s_migration_4 [] =
    "ALTER TABLE agents ADD COLUMN runtime TEXT;        -- catalog alias; NULL: an image outside the catalog\n"
    "ALTER TABLE sandboxes ADD COLUMN runtime TEXT;     -- the runtime it was built from\n"
    "ALTER TABLE sandboxes ADD COLUMN progress TEXT;    -- preparing: what the image build is doing\n";

//  Host agents: a sandbox whose host does not answer is shown
//  unreachable (its state kept underneath, so it comes back as it was);
//  each host as the server last found it, for `agenthold hosts`.
static const char s_migration_5 [] =
    "ALTER TABLE sandboxes ADD COLUMN unreachable TEXT;   -- why its host does not answer (NULL: it does)\n"
    "CREATE TABLE hosts (\n"
    "  name       TEXT PRIMARY KEY,                -- hostd.name, or the endpoint before it answered\n"
    "  endpoint   TEXT NOT NULL,\n"
    "  state      TEXT NOT NULL CHECK (state IN ('up','unreachable','refused')),\n"
    "  version    TEXT,                            -- its agenthold release\n"
    "  protocol   INTEGER,\n"
    "  error      TEXT,                            -- why, when not up\n"
    "  seen_at    INTEGER,                         -- it last answered\n"
    "  updated_at INTEGER NOT NULL\n"
    ");\n";

//  Migration 6 (lifetimes, the audit trail, tombstones): each audit row
//  keeps the agent's name (readable after the agent is gone), the run
//  or session that caused it and a byte count; a tombstone remembers its
//  attempts, when the next one is due and why the last failed; a
//  sandbox remembers when it was stopped, when its container was
//  removed (sandbox.container_ttl) and who caused what it does now;
//  a token may be one that reads /metrics only.
static const char s_migration_6 [] =
    "ALTER TABLE operations ADD COLUMN agent_name TEXT;\n"
    "ALTER TABLE operations ADD COLUMN run TEXT;          -- run or session the caller named\n"
    "ALTER TABLE operations ADD COLUMN bytes INTEGER;     -- a read's or a write's byte count\n"
    "CREATE INDEX operations_run ON operations(run) WHERE run IS NOT NULL;\n"
    "ALTER TABLE tombstones ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE tombstones ADD COLUMN next_at INTEGER;   -- the next retry (NULL: none failed yet)\n"
    "ALTER TABLE tombstones ADD COLUMN last_error TEXT;\n"
    "ALTER TABLE sandboxes ADD COLUMN stopped_at INTEGER;            -- when it went to sleep\n"
    "ALTER TABLE sandboxes ADD COLUMN container_removed_at INTEGER;  -- its container was expired\n"
    "ALTER TABLE sandboxes ADD COLUMN cause TEXT;         -- who caused the state it moves to\n"
    "UPDATE sandboxes SET stopped_at = updated_at WHERE state = 'sleeping';\n"
    "ALTER TABLE api_tokens ADD COLUMN metrics_only INTEGER NOT NULL DEFAULT 0;\n";

//  Migration 7 (a turn's run, an error's lifetimes): a turn keeps the run
//  it works for and the token that began it, so what that token does on
//  the agent while the turn is open is stamped with the run; an error
//  row whose lifetime ends keeps the operation that failed.
static const char s_migration_7 [] =
    "ALTER TABLE turns ADD COLUMN run TEXT;               -- the run it works for (NULL: its own id)\n"
    "ALTER TABLE turns ADD COLUMN actor TEXT;             -- who began it: \"api:<token name>\"\n"
    "CREATE INDEX turns_open ON turns(agent_id, actor, expires_at) WHERE ended_at IS NULL;\n"
    "ALTER TABLE sandboxes ADD COLUMN failed_op TEXT;     -- an error row's op while it expires\n"
    "UPDATE sandboxes SET stopped_at = updated_at WHERE state = 'error' AND stopped_at IS NULL;\n";

//  Migration 8 (a running agent's connection): whether its sandboxd holds
//  a tunnel connection now (hello said), so an agent that is running
//  while its sandboxd redials says so. Lifecycle writes it (hello, lost,
//  every state change, and 0 for all at each start).
static const char s_migration_8 [] =
    "ALTER TABLE sandboxes ADD COLUMN connected INTEGER NOT NULL DEFAULT 0;\n";

//  Migration 9 (conversations, issue 26): a conversation is an id under
//  an agent and its tenant, with the harness's ACP session behind it
//  (restored after each boot) and whether a turn runs; its log is the
//  numbered entries the conversations actor writes. The tenant is the
//  agent's, kept on the row so every route filters by it in one place.
static const char s_migration_9 [] =
    "CREATE TABLE conversations (\n"
    "  id               TEXT PRIMARY KEY,         -- 16 lowercase hex characters\n"
    "  agent_id         TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,\n"
    "  tenant           TEXT NOT NULL,            -- the agent's\n"
    "  acp_session_id   TEXT,                     -- the harness's sessionId (NULL: none yet)\n"
    "  created_at       INTEGER NOT NULL,\n"
    "  last_activity_at INTEGER NOT NULL,         -- a prompt, a turn's end\n"
    "  turn_state       TEXT NOT NULL DEFAULT 'idle'\n"
    "                     CHECK (turn_state IN ('idle','running','cancelling'))\n"
    ");\n"
    "CREATE INDEX conversations_agent ON conversations(agent_id, created_at);\n"
    "CREATE INDEX conversations_turns ON conversations(agent_id) WHERE turn_state <> 'idle';\n"
    "CREATE TABLE conversation_log (\n"
    "  conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,\n"
    "  seq             INTEGER NOT NULL,          -- 1, 2, 3... within the conversation\n"
    "  at              INTEGER NOT NULL,\n"
    "  kind            TEXT NOT NULL,             -- docs/conversations.md \"The log\"\n"
    "  body            TEXT NOT NULL CHECK (json_type(body) = 'object'),\n"
    "  who             TEXT NOT NULL,             -- \"api:<token name>\", \"harness\", \"server\", \"policy\"\n"
    "  PRIMARY KEY (conversation_id, seq)\n"
    ") WITHOUT ROWID;\n";

//  Migration 10 (the policy at run time, issue 28): whether an agent's
//  idle_minutes is the server's default idle timeout (it named none), so
//  a change of sandbox.idle_minutes by PUT /api/v1/policy, or in the
//  configuration across a restart, moves it. Agents made before keep the
//  value they hold.
static const char s_migration_10 [] =
    "ALTER TABLE agents ADD COLUMN idle_default INTEGER NOT NULL DEFAULT 0;\n";

//  Migration 11 (egress through the server, issue 27): each tenant's
//  egress allow and deny lists (docs/egress.md), entries of
//  proto/egress.h's grammar in the order the admin gave them; changed by
//  PATCH /api/v1/tenants/{tenant}, read for each connection.
static const char s_migration_11 [] =
    "CREATE TABLE tenant_egress (\n"
    "  tenant TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,\n"
    "  list   TEXT NOT NULL CHECK (list IN ('allow','deny')),\n"
    "  pos    INTEGER NOT NULL,                   -- 0, 1, 2... within the list\n"
    "  entry  TEXT NOT NULL,                      -- name, *.name, *, address or range, [:port]\n"
    "  PRIMARY KEY (tenant, list, pos)\n"
    ") WITHOUT ROWID;\n";

//  Migration 12 (the frozen tier, issue 29): a sandbox may be freezing,
//  frozen (its processes paused, its memory kept) or thawing, and keeps
//  when it was frozen (frozen_at: the ladder's clock to sleep). SQLite
//  cannot change a CHECK in place: the table is made again, its rows
//  copied (foreign keys are off while migrations run).
static const char s_migration_12 [] =
    "CREATE TABLE sandboxes_new (\n"
    "  agent_id         TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,\n"
    "  state            TEXT NOT NULL CHECK (state IN ('creating','starting','running','stopping',\n"
    "                     'sleeping','rebuilding','destroying','error','freezing','frozen','thawing')),\n"
    "  op               TEXT,\n"
    "  op_started_at    INTEGER,\n"
    "  error            TEXT,\n"
    "  needs_rebuild    INTEGER NOT NULL DEFAULT 0,\n"
    "  image            TEXT NOT NULL,\n"
    "  cpus             REAL NOT NULL,\n"
    "  memory_mb        INTEGER NOT NULL,\n"
    "  last_activity_at INTEGER,\n"
    "  boot_token_hash  TEXT,\n"
    "  updated_at       INTEGER NOT NULL,\n"
    "  home_lost        TEXT,\n"
    "  runtime          TEXT,\n"
    "  progress         TEXT,\n"
    "  unreachable      TEXT,\n"
    "  stopped_at       INTEGER,\n"
    "  container_removed_at INTEGER,\n"
    "  cause            TEXT,\n"
    "  failed_op        TEXT,\n"
    "  connected        INTEGER NOT NULL DEFAULT 0,\n"
    "  frozen_at        INTEGER                -- when it was frozen (NULL: it is not)\n"
    ");\n"
    "INSERT INTO sandboxes_new (agent_id, state, op, op_started_at, error, needs_rebuild, image, cpus,\n"
    "  memory_mb, last_activity_at, boot_token_hash, updated_at, home_lost, runtime, progress,\n"
    "  unreachable, stopped_at, container_removed_at, cause, failed_op, connected)\n"
    "  SELECT agent_id, state, op, op_started_at, error, needs_rebuild, image, cpus,\n"
    "  memory_mb, last_activity_at, boot_token_hash, updated_at, home_lost, runtime, progress,\n"
    "  unreachable, stopped_at, container_removed_at, cause, failed_op, connected FROM sandboxes;\n"
    "DROP TABLE sandboxes;\n"
    "ALTER TABLE sandboxes_new RENAME TO sandboxes;\n"
    "ALTER TABLE sleep_forecast ADD COLUMN stops_at INTEGER; -- when it would be stopped (the ladder)\n";

//  The frozen tier's memory ceiling (sandbox.frozen_memory_mb): the
//  sleeper reads the frozen sandboxes, longest-frozen first, each pass.
static const char s_migration_13 [] =
    "CREATE INDEX sandboxes_frozen ON sandboxes(frozen_at) WHERE state = 'frozen';\n";

//  Migration 14 (an agent's harness override, issue 26): an admin may
//  name the harness one agent runs instead of its runtime's
//  (docs/conversations.md "Choosing the harness"): the JSON text of
//  {"command": [...], "env": {...}}, held to the catalog's "harness"
//  rules when written (catalog/catalog.h); NULL: the runtime's.
static const char s_migration_14 [] =
    "ALTER TABLE agents ADD COLUMN harness TEXT;  -- an admin's harness override (JSON); NULL: the runtime's\n";

//  Migration 15 (revocable port links, issue 30): each link made by POST
//  .../ports/{port}/link is a row; the proxy lets a link through only
//  while its row stands (docs/ports.md "Links"), so deleting the row
//  revokes it. Expired rows are purged when a link is made.
static const char s_migration_15 [] =
    "CREATE TABLE port_links (\n"
    "  id          TEXT PRIMARY KEY,             -- 12 lowercase hex characters, in the link\n"
    "  agent_id    TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,\n"
    "  port        INTEGER NOT NULL,\n"
    "  expires_at  INTEGER NOT NULL,             -- ms since the epoch (the link's expiry)\n"
    "  made_by     TEXT NOT NULL,                -- the token (or user) that made it\n"
    "  created_at  INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX port_links_agent ON port_links(agent_id, expires_at);\n";

//  Migration 16 (public ports, issue 30): the ports a tenant marked
//  public (PUT .../ports/{port} {"public": true}); lua/ports.lua then
//  decides whether /p/{agent_id}/{port}/public/... needs no credential.
static const char s_migration_16 [] =
    "CREATE TABLE public_ports (\n"
    "  agent_id  TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,\n"
    "  port      INTEGER NOT NULL,\n"
    "  made_by   TEXT NOT NULL,                  -- the token (or user) that marked it\n"
    "  made_at   INTEGER NOT NULL,\n"
    "  PRIMARY KEY (agent_id, port)\n"
    ");\n";

//  Migration 17 (warm pools, issue 31): a sandbox made ahead of any
//  request, belonging to no tenant (agents.tenant '', a name no tenant
//  can hold), is an agent row whose pool names the runtime whose warm
//  pool holds it. A create that takes it sets pool to NULL with its
//  name and tenant in one guarded UPDATE (docs/lifecycle.md "Warm pools").
static const char s_migration_17 [] =
    "ALTER TABLE agents ADD COLUMN pool TEXT;    -- warm: the runtime whose pool holds it; NULL: an agent\n"
    "CREATE INDEX agents_pool ON agents(pool) WHERE pool IS NOT NULL;\n";

//  Migration 18 (secrets the sandbox never sees, issue 27): a header a
//  tenant attaches to one host and port (docs/egress.md "Secrets"); the
//  server adds it to each request of a connection to that host, whose
//  TLS it terminates. The value is sealed with the installation's key
//  (<data_dir>/secrets.key), bound to its row.
static const char s_migration_18 [] =
    "CREATE TABLE egress_secrets (\n"
    "  tenant      TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,\n"
    "  host        TEXT NOT NULL,                -- proto/egress.h's host: lower case, an IPv6 literal bare\n"
    "  port        INTEGER NOT NULL,             -- 443 unless named\n"
    "  header      TEXT NOT NULL,                -- an HTTP field name, as the admin spelt it\n"
    "  value       BLOB NOT NULL,                -- sealed: common/secretbox.h (AES-256-GCM), never plain\n"
    "  created_at  INTEGER NOT NULL,\n"
    "  PRIMARY KEY (tenant, host, port)\n"
    ") WITHOUT ROWID;\n";

//  Migration 19 (warm pools drained on a rebuild, issue 31): the
//  engine's id of the image a warm sandbox's container was made from,
//  read once it is made. A runtime's image made again under the same
//  reference is another id: the warm sandboxes of the old one are drained
//  (docs/lifecycle.md "Warm pools"). NULL: not known (a driver that names
//  no ids, a row made before this migration).
static const char s_migration_19 [] =
    "ALTER TABLE agents ADD COLUMN image_id TEXT;    -- the engine's image id it was made from; NULL: not known\n";

const ah_migration_t ah_migrations [] = {
    { 1, "the backbone", s_migration_1 },
    { 2, "sleep and wake", s_migration_2 },
    { 3, "tenants, tokens and sessions", s_migration_3 },
    { 4, "runtimes", s_migration_4 },
    { 5, "host agents", s_migration_5 },
    { 6, "lifetimes, the audit trail and tombstones", s_migration_6 },
    { 7, "a turn's run, an error's lifetimes", s_migration_7 },
    { 8, "a running agent's connection", s_migration_8 },
    { 9, "conversations", s_migration_9 },
    { 10, "the default idle timeout at run time", s_migration_10 },
    { 11, "tenants' egress lists", s_migration_11 },
    { 12, "the frozen tier", s_migration_12 },
    { 13, "the frozen sandboxes' memory ceiling", s_migration_13 },
    { 14, "an agent's harness override", s_migration_14 },
    { 15, "revocable port links", s_migration_15 },
    { 16, "public ports", s_migration_16 },
    { 17, "warm pools", s_migration_17 },
    { 18, "egress secrets", s_migration_18 },
    { 19, "the image a warm sandbox was made from", s_migration_19 },
};
const int ah_migrations_count = (int) (sizeof ah_migrations / sizeof ah_migrations [0]);
