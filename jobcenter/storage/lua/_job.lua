--[[ _job: the context of every job-scoped script, prepended after _common.
  KEYS[1] job hash  KEYS[2] tasks hash  KEYS[3] history list  KEYS[4] frontier list
  KEYS[5] leases zset  KEYS[6] claims hash  KEYS[7] leader zset  KEYS[8] leader wake list
  KEYS[9] dead-letter zset  KEYS[10] active jobs zset  KEYS[11] expiring zset (what recovery
  trims from the list indexes, and when)  KEYS[12] the job's idempotency key (the job hash
  again when it has none)  KEYS[13] the shard's due notifications zset
  KEYS[14..18] the per-state job indexes (zsets), in JOB_STATES order
  KEYS[19] the job's packed record (string: its tasks and history once finished, compacted;
  the scripts that touch it name it PACKED themselves)
  KEYS[20..24] the shard's limits hash, slots hash, parked zset, freed set, freed wake list
  (_slots.lua)  KEYS[25] the shard's event stream  KEYS[26] the shard's metrics hash
  KEYS[27] the shard's archive-pending zset when an archive is configured (the job hash again
  when not): a finished job waits there, without a TTL, until the archive confirmed it
  KEYS[28..] three per queue the job's tasks may enter: ready zset, delayed zset, wake list
  ARGV[1] job id  ARGV[2] default retention ms  ARGV[3] events kept per shard (about; 0: no
  events)  ARGV[4] '1' to keep metrics  ARGV[5] number of queues  ARGV[6..] their names,
  in KEYS order
  FIRST_OWN_ARG is the index of the script's own first ARGV; FIRST_OWN_KEY of its own first
  extra KEY.
  Scripts that only touch running attempts (start, heartbeat) may pass no queues. ]]

local JOB, TASKS, HISTORY, FRONTIER = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local LEASES, CLAIMS, LEADER, LEADER_WAKE, DLQ = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local ACTIVE, EXPIRING, IDEM, NOTIFY = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local JOB_ID = ARGV[1]
local DEFAULT_RETENTION_MS = tonumber(ARGV[2])
local QUEUE_COUNT = tonumber(ARGV[5])
local STATE_INDEX = {} -- job state -> the zset of jobs in that state (what `list --state` reads)
for k, state in ipairs(JOB_STATES) do STATE_INDEX[state] = KEYS[13 + k] end
-- KEYS[14 + #JOB_STATES] is the packed record (named PACKED by the scripts that touch it).
-- the shard's limit keys (_slots.lua's table: the main chunk may hold at most 200 locals)
SLOT.keys = {limits = KEYS[15 + #JOB_STATES], slots = KEYS[16 + #JOB_STATES],
  parked = KEYS[17 + #JOB_STATES], freed = KEYS[18 + #JOB_STATES], wake = KEYS[19 + #JOB_STATES]}
-- Events and metrics (one table, for the same reason).
OBS.events, OBS.metrics = KEYS[20 + #JOB_STATES], KEYS[21 + #JOB_STATES]
OBS.maxlen, OBS.metrics_on, OBS.counts = tonumber(ARGV[3]), ARGV[4] == '1', {}
OBS.maxlen_arg = ARGV[3] -- as XADD gets it: a number would be formatted by each call
-- the archive-pending zset, or false without an archive (in SLOT's table: the locals' limit)
SLOT.archive = KEYS[22 + #JOB_STATES] ~= KEYS[1] and KEYS[22 + #JOB_STATES]
local QUEUE_KEYS_BASE = 22 + #JOB_STATES -- the queue keys follow
local QUEUES = {}
for qi = 1, QUEUE_COUNT do
  local k = QUEUE_KEYS_BASE + (qi - 1) * 3
  QUEUES[ARGV[5 + qi]] = {ready = KEYS[k + 1], delayed = KEYS[k + 2], wake = KEYS[k + 3]}
end
local FIRST_OWN_ARG = 6 + QUEUE_COUNT
local FIRST_OWN_KEY = QUEUE_KEYS_BASE + 1 + QUEUE_COUNT * 3

local FRONTIER_BUDGET = 300 -- child visits per call: a few ms, well under 50 ms under load
-- ... but a completion's own: until its script ends, no other worker can claim the tasks it
-- released (their wake-ups wait too), so it releases a burst's first ones and hands the rest
-- to 'continue' steps of FRONTIER_BUDGET
local COMPLETE_FRONTIER_BUDGET = 100
local HISTORY_MAX = 200000 -- history entries kept per job (oldest trimmed)

local META = {}

-- Point the context at another job of the same shard (submit.lua stores several jobs per
-- call): its id and its own keys KEYS[k..k+4] (hash, tasks hash, history, frontier,
-- idempotency key); its fields are read again (load_job) before they are used.
local function bind_job(k, job_id)
  JOB, TASKS, HISTORY, FRONTIER, IDEM = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  JOB_ID, META = job_id, {}
end
-- Read the job's fields; false when the job hash does not exist (META.refusal: JOB_GONE), or
-- a newer release wrote it (NEWER_PROTOCOL): this one must not change what it may not
-- understand (its queue entries, which it could not even find). Called before any write.
local function load_job()
  local m = redis.call('HMGET', JOB, JOB_FIELD.STATE, JOB_FIELD.QUEUE, JOB_FIELD.PRIORITY,
    JOB_FIELD.SEQ, JOB_FIELD.QUEUES, JOB_FIELD.TRIGGER_RULES, JOB_FIELD.PACKED, JOB_FIELD.TASKS,
    JOB_FIELD.NAME, JOB_FIELD.IDEMPOTENCY_KEY, JOB_FIELD.LEFT, JOB_FIELD.PROTOCOL,
    JOB_FIELD.PAUSED)
  if not m[1] then
    META = {refusal = JOB_GONE}
    return false
  end
  if tonumber(m[12] or PROTOCOL) > PROTOCOL then
    META = {refusal = NEWER_PROTOCOL}
    return false
  end
  -- packed: finished and compacted, so its tasks hash is gone and no task of it runs
  META = {state = m[1], queue = m[2], priority = tonumber(m[3]), seq = tonumber(m[4]),
          queues = m[5] or '', rules = m[6] ~= false, packed = m[7] and true or false,
          n = tonumber(m[8] or 0), name = m[9] or '', idem = m[10] or false,
          left = tonumber(m[11] or 0), paused = m[13] ~= false}
  return true
end

-- A job of n tasks: its tasks hash as a hash table once n is large enough (schema.py). A
-- job's first starts (start.lua, while none of its tasks ended) convert it, not its submit:
-- a job waiting in a backlog keeps the compact form until it runs.
local function tasks_as_hashtable(n)
  if n >= TASKS_HASHTABLE_MIN_TASKS then as_hashtable(TASKS) end
end

-- Every queue the job's tasks may enter, and its idempotency key, were passed in KEYS
-- (checked before any write).
local function queues_passed()
  for name in string.gmatch(META.queues, '[^,]+') do
    if not QUEUES[name] then return false end
  end
  if IDEM ~= JOB then return true end
  if META.idem == nil then return redis.call('HEXISTS', JOB, JOB_FIELD.IDEMPOTENCY_KEY) == 0 end
  return not META.idem -- read by load_job
end

-- Task i's reservation or attempt ended (its lease is dropped): give its pool and limit
-- slots back. Every transition that removes a lease calls this; it acts once.
function SLOT.free_slots(i)
  local k = SLOT.keys
  SLOT.free_slots_of(k.limits, k.slots, k.freed, k.wake, JOB_ID .. '|' .. i)
end

-- Limit `id` has room again: wake the workers of this job's queues where tasks are parked
-- waiting for it (parked entries sort by queue, then limit), so the worker that serves them
-- claims them now rather than at its idle poll.
function SLOT.wake_parked_queues(id, n)
  for qname, queue in pairs(QUEUES) do
    if SLOT.first_parked(SLOT.keys.parked, qname, id) then wake(queue.wake, n) end
  end
end

-- The job is gone (expired, deleted): drop the leases and claims of the task indexes
-- ARGV[first..], and give back their slots, so nothing keeps pointing at it.
local function drop_reservations(first)
  for k = first, #ARGV do
    redis.call('ZREM', LEASES, JOB_ID .. '|' .. ARGV[k])
    redis.call('HDEL', CLAIMS, JOB_ID .. '|' .. ARGV[k])
    SLOT.free_slots(ARGV[k])
  end
end

-- Set the job's state and move the job to that state's index, in one step, so `list --state`
-- reads exactly the jobs in that state.
local function set_job_state(state)
  local j = redis.call('HMGET', JOB, JOB_FIELD.STATE, JOB_FIELD.CREATED_AT)
  if j[1] and j[1] ~= state then redis.call('ZREM', STATE_INDEX[j[1]], JOB_ID) end
  redis.call('ZADD', STATE_INDEX[state], j[2], JOB_ID)
  redis.call('HSET', JOB, JOB_FIELD.STATE, state)
  META.state = state
end

-- The job's entry in the expiring zset: what trimming needs once the job's keys are gone.
local function expiring_member()
  local j = redis.call('HMGET', JOB, JOB_FIELD.OWNER, JOB_FIELD.SCHEDULE_ID, JOB_FIELD.TAGS)
  local member = JOB_ID .. '\t' .. (j[1] or '') .. '\t' .. (j[2] or '')
  if j[3] then member = member .. '\t' .. j[3] end -- its tag indexes (none: as before tags)
  return member
end

-- The one way a transition says what it did: an entry in the shard's event stream, capped
-- near OBS.maxlen (trimmed by whole stream nodes: cheap). Its id is the Redis time. i is
-- a task index (false for the job's own events); extra holds more field, value pairs
-- (EVENT_FIELD.).
function OBS.emit(kind, i, extra)
  if OBS.maxlen <= 0 then return end
  local entry = {EVENT_FIELD.KIND, kind, EVENT_FIELD.JOB, JOB_ID}
  if i then
    entry[5] = EVENT_FIELD.INDEX
    entry[6] = i
  end
  for _, v in ipairs(extra or {}) do entry[#entry + 1] = v end
  redis.call('XADD', OBS.events, 'MAXLEN', '~', OBS.maxlen_arg, '*', unpack(entry))
end

-- Many tasks' events of one kind in one entry, as the hot path makes them (a batch of
-- starts, completions, tasks queued): EVENT_FIELD.INDEX lists the indexes, EVENT_FIELD.ATTEMPT
-- (when given) their attempts, comma-separated; readers expand it into one event per task.
function OBS.emit_many(kind, indexes, attempts, extra)
  if OBS.maxlen <= 0 or #indexes == 0 then return end
  local entry = {EVENT_FIELD.KIND, kind, EVENT_FIELD.JOB, JOB_ID, EVENT_FIELD.INDEX,
    table.concat(indexes, ',')}
  if attempts then
    entry[7] = EVENT_FIELD.ATTEMPT
    entry[8] = table.concat(attempts, ',')
  end
  for _, v in ipairs(extra or {}) do entry[#entry + 1] = v end
  redis.call('XADD', OBS.events, 'MAXLEN', '~', OBS.maxlen_arg, '*', unpack(entry))
end

-- An attempt's fields for an event (attempt, handler) and, when given, its error, short.
function OBS.attempt_of(i, err)
  local a = redis.call('HMGET', TASKS, TF_ATTEMPTS .. i, TF_HANDLER .. i)
  local extra = {EVENT_FIELD.ATTEMPT, a[1] or '0', EVENT_FIELD.HANDLER, a[2] or ''}
  if err then
    extra[5] = EVENT_FIELD.ERROR
    extra[6] = string.sub(err, 1, OBS.error_max)
  end
  return extra
end

-- Metrics: counters in the shard's hash, kept by the transitions (a scrape only reads them).
-- Increments are summed here and written once per field by OBS.flush_counts(), which every
-- script that counts calls before it returns (flush_wakes() does it too).
function OBS.count(field, n)
  if OBS.metrics_on then OBS.counts[field] = (OBS.counts[field] or 0) + (n or 1) end
end
function OBS.flush_counts()
  local added = false -- a field new to the hash: a counter is only ever raised, so it reads n
  for field, n in pairs(OBS.counts) do
    -- adding 0 changes nothing a scrape sees: an absent field reads as 0
    if n ~= 0 then added = redis.call('HINCRBY', OBS.metrics, field, n) == n or added end
  end
  OBS.counts = {}
  -- once a call: a hash table stays one for as long as Redis runs
  if added and not OBS.kept then keep_hashtable(OBS.metrics, redis.call('HLEN', OBS.metrics)) end
  OBS.kept = OBS.kept or added
end

-- One observation (ms) of a histogram: its bucket's counter and the sum (schema.py).
function OBS.observe(bucket_prefix, sum_field, ms)
  if not OBS.metrics_on then return end
  local bucket = #OBS.buckets_ms + 1
  for b, bound in ipairs(OBS.buckets_ms) do
    if ms <= bound then
      bucket = b
      break
    end
  end
  OBS.count(bucket_prefix .. OBS.bucket_suffixes[bucket])
  OBS.count(sum_field, ms)
end

-- The payload is msgpack of a map whose first key is PAYLOAD_KEY.TASK (layout.py writes it first):
-- the task name is the string right after it, read here without unpacking the arguments.
OBS.TASK_KEY = string.char(160 + #PAYLOAD_KEY.TASK) .. PAYLOAD_KEY.TASK -- as a msgpack fixstr
function OBS.payload_task_name(p)
  if not p or string.sub(p, 2, 1 + #OBS.TASK_KEY) ~= OBS.TASK_KEY then return nil end
  local at = 2 + #OBS.TASK_KEY -- the name's msgpack header
  local b = string.byte(p, at)
  if b >= 160 and b <= 191 then return string.sub(p, at + 1, at + b - 160) end -- fixstr
  if b == 217 then return string.sub(p, at + 2, at + 1 + string.byte(p, at + 1)) end -- str 8
  return nil
end

local function task_state(i) return redis.call('HGET', TASKS, TF_STATE .. i) end
local function lease_member(i) return JOB_ID .. '|' .. i end
-- The index is zero-padded so a job's tasks sort in spec order, not as strings (10 < 2).
-- A task with a rank (TF_RANK, jobcenter/model/ordering.py) has it right after the job's
-- sequence number: within a priority, jobs keep their submit order and the rank orders one
-- job's tasks. (Every task of a job has a rank or none does, so the two forms never meet.)
-- A task with pool or limit slots to take has them at the end (_slots.lua), for claim.lua.
local function member_of(i, rank, limits)
  local member
  if rank then
    member = string.format('%012d%06d|%s|%06d', META.seq, rank, JOB_ID, i)
  else
    member = string.format('%012d|%s|%06d', META.seq, JOB_ID, i)
  end
  if limits then return member .. '|' .. limits end
  return member
end
local function queue_member(i)
  local f = redis.call('HMGET', TASKS, TF_RANK .. i, TF_LIMITS .. i)
  return member_of(i, f[1], f[2])
end
-- A queued task leaving its queue without a claim (cancel, abandon) leaves the parked zset
-- too, if it waits there for a full limit.
function SLOT.unpark(i) SLOT.unpark_of(SLOT.keys.limits, SLOT.keys.parked, lease_member(i)) end
local function task_queue(i) return redis.call('HGET', TASKS, TF_QUEUE .. i) or META.queue end
local function task_priority(i)
  local p = redis.call('HGET', TASKS, TF_PRIORITY .. i)
  if p then return tonumber(p) end
  return META.priority
end
-- Where task i stands in its queue's order, as one string that sorts as the queue does
-- (priority, then its member; given when the caller has them): a worker runs what it holds so.
OBS.order_prefix = {} -- priority -> its text, formatted once a call
function OBS.run_order(i, priority, member)
  priority = priority or task_priority(i)
  OBS.order_prefix[priority] = OBS.order_prefix[priority]
    or string.format('%010d', 1000000000 - priority) .. '|'
  return OBS.order_prefix[priority] .. (member or queue_member(i))
end
-- What a worker holding task i must know of its children (csv: its TF_CHILDREN, false for
-- none): 0, none; else the run order of its first child, before which the worker may prefetch
-- (a thread freed while i runs starts what it holds in run order, so nothing held may come
-- after a child i releases later); 1 past OBS.CHILDREN_ORDERED children (not read: the
-- worker prefetches nothing while it holds i). Kept for siblings (a fan-in's) in one call.
OBS.CHILDREN_ORDERED = 8
function OBS.children_after(csv)
  if not csv then return 0 end
  if csv == OBS.children_csv and JOB_ID == OBS.children_job then return OBS.children_first end
  local first, n = nil, 0
  for c in string.gmatch(csv, '[^,]+') do
    n = n + 1
    if n > OBS.CHILDREN_ORDERED then return 1 end
    local f = redis.call('HMGET', TASKS, TF_PRIORITY .. c, TF_RANK .. c, TF_LIMITS .. c)
    local order = OBS.run_order(c, tonumber(f[1]) or META.priority, member_of(c, f[2], f[3]))
    if not first or order < first then first = order end
  end
  OBS.children_csv, OBS.children_job, OBS.children_first = csv, JOB_ID, first or 0
  return first or 0
end
local function max_attempts(i) return tonumber(redis.call('HGET', TASKS, TF_MAX_ATTEMPTS .. i) or 1) end
-- The fencing token of a task's current attempt, from its fields: "<attempt>:<handler>:<nonce>"
-- (the nonce: random, drawn by the worker for its claim: no two claims share a token).
local function token_of(attempt, owner, nonce)
  return (attempt or '0') .. ':' .. (owner or '') .. ':' .. (nonce or '')
end
-- Why a report under `token` is refused when it is not the task's current one (a: its
-- attempt, handler and nonce). Stale: an attempt Redis started, that the task moved on from
-- (its nonce is the task's: given back). Unknown: an attempt number Redis has not reached, or
-- one it started again under another nonce: Redis lost the writes of that attempt's claim (a
-- restart from an older snapshot, a failover to a replica that lagged). After a give-back
-- (handler cleared, nonce kept) the number given back counts as reached: a late report of it
-- is stale (a rollback to just after a give-back is not told apart).
local function refusal_of(token, a)
  local attempt, nonce = string.match(token, '^(%d+):.*:(%x*)$')
  if nonce and nonce == a[3] then return ITEM_STALE_TOKEN end
  local reached = tonumber(a[1] or 0)
  if not a[2] and a[3] then reached = reached + 1 end
  attempt = tonumber(attempt or 0)
  if attempt > reached or (attempt == reached and a[2]) then return ITEM_UNKNOWN_ATTEMPT end
  return ITEM_STALE_TOKEN
end
-- The live-attempt check: nil when `handler` reports under the token of the task's current
-- attempt (its fields: attempt number, owner, nonce, as read), else the code refusing the
-- report (refusal_of).
local function live_attempt_refusal(token, handler, attempt, owner, nonce)
  if token_of(attempt, owner, nonce) == token and owner == handler then return nil end
  return refusal_of(token, {attempt, owner, nonce})
end
-- live_attempt_refusal of task i, read here; and the task's attempt, handler and nonce.
local function token_refusal(i, token, handler)
  local a = redis.call('HMGET', TASKS, TF_ATTEMPTS .. i, TF_HANDLER .. i, TF_NONCE .. i)
  return live_attempt_refusal(token, handler, a[1], a[2], a[3]), a
end

-- Begin attempt number `attempt` of task i (queued or waiting for its retry: the caller
-- checked) for `handler` under its claim's `nonce`, started at `now`: the fields it sets go
-- to `writes` (field, value pairs for one HSET), and the last attempt's error, finish time and
-- progress, those it has (history now), to `clears` (for one HDEL).
local function begin_attempt(writes, clears, i, attempt, handler, nonce, now, error, finished,
    progress)
  local n = #writes
  writes[n + 1], writes[n + 2] = TF_STATE .. i, T_RUNNING
  writes[n + 3], writes[n + 4] = TF_ATTEMPTS .. i, attempt
  writes[n + 5], writes[n + 6] = TF_HANDLER .. i, handler
  writes[n + 7], writes[n + 8] = TF_NONCE .. i, nonce
  writes[n + 9], writes[n + 10] = TF_STARTED_AT .. i, now
  writes[n + 11], writes[n + 12] = TF_UPDATED_AT .. i, now
  if error then clears[#clears + 1] = TF_ERROR .. i end
  if finished then clears[#clears + 1] = TF_FINISHED_AT .. i end
  if progress then clears[#clears + 1] = TF_PROGRESS .. i end
end

-- Tasks first..last (indexes) were just written by the split: record when (the task's
-- creation time, as status shows it; its last-modified time is this too until a transition).
local function stamp_created(first, last, now)
  local fields = {}
  for i = first, last do
    fields[#fields + 1] = TF_CREATED_AT .. i
    fields[#fields + 1] = now
  end
  call_chunked('HSET', TASKS, fields)
end

-- The job asked to be told of `kind` (spec `notify:` `on`: a final state or an event): a due
-- delivery per channel, "<channel><suffix>|<job>", each its own record (notifications.py).
-- A delivery still under way for an earlier outcome (a retried job) carries on as it is.
-- `counted`: one of the job's first NOTICE.TASK_FAILED_MAX task_failed notices, else none.
local function queue_notice(kind, suffix, now, counted)
  local j = redis.call('HMGET', JOB, JOB_FIELD.NOTIFY_ON, JOB_FIELD.NOTIFY_TO)
  if not j[1] or not string.find(',' .. j[1] .. ',', ',' .. kind .. ',', 1, true) then return end
  if counted and redis.call('HINCRBY', JOB, JOB_FIELD.TASK_FAILED_NOTICES, 1)
      > NOTICE.TASK_FAILED_MAX then return end
  for channel in string.gmatch(j[2] or '', '[^,]+') do
    redis.call('ZADD', NOTIFY, 'NX', now, channel .. suffix .. '|' .. JOB_ID)
  end
end

-- Labels of task i's metrics: its queue and task name ('?' when its payload is gone).
function OBS.task_labels(i, name)
  name = name or OBS.payload_task_name(redis.call('HGET', TASKS, TF_PAYLOAD .. i)) or '?'
  return task_queue(i) .. '\t' .. name
end

-- Task i ended in `state` (a terminal one): counted by queue, task name and state (labels:
-- OBS.task_labels(i), when the caller has them).
function OBS.count_finished(i, state, labels)
  if OBS.metrics_on then OBS.count(METRIC_FIELD.FINISHED .. '\t' .. (labels or OBS.task_labels(i)) .. '\t' .. state) end
end

-- An attempt of task i ran from `started` until now: its run time, by queue and task name.
function OBS.observe_run(i, started, now, labels)
  if not (OBS.metrics_on and started) then return end
  labels = labels or OBS.task_labels(i)
  OBS.observe(METRIC_FIELD.RUN .. '\t' .. labels, METRIC_FIELD.RUN_SUM .. '\t' .. labels,
    math.max(0, now - tonumber(started)))
end

-- A task of queue qname starts: its queue wait, from when it was queued, or for a retry from
-- its last attempt's end (so a retry's backoff counts as waiting).
function OBS.observe_wait(qname, queued, last_ended, now)
  if not (OBS.metrics_on and queued) then return end
  local since = math.max(tonumber(queued), tonumber(last_ended or 0))
  OBS.observe(METRIC_FIELD.WAIT .. '\t' .. qname, METRIC_FIELD.WAIT_SUM .. '\t' .. qname,
    math.max(0, now - since))
end
