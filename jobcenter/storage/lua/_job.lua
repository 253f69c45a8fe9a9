--[[ _job: the context of every job-scoped script, prepended after _common.
  KEYS[1] job hash  KEYS[2] tasks hash  KEYS[3] history list  KEYS[4] frontier list
  KEYS[5] leases zset  KEYS[6] claims hash  KEYS[7] leader zset  KEYS[8] leader wake list
  KEYS[9] dead-letter zset  KEYS[10] active jobs zset  KEYS[11] expiring zset (what recovery
  trims from the list indexes, and when)  KEYS[12] the job's idempotency key (the job hash
  again when it has none)  KEYS[13] the shard's due notifications zset
  KEYS[14..18] the per-state job indexes (zsets), in JOB_STATES order
  KEYS[19] the job's packed record (string: its tasks and history once finished, compacted;
  the scripts that touch it name it P themselves)
  KEYS[20..24] the shard's limits hash, slots hash, parked zset, freed set, freed wake list
  (_slots.lua)  KEYS[25] the shard's event stream  KEYS[26] the shard's metrics hash
  KEYS[27..] three per queue the job's tasks may enter: ready zset, delayed zset, wake list
  ARGV[1] job id  ARGV[2] default retention ms  ARGV[3] events kept per shard (about; 0: no
  events)  ARGV[4] '1' to keep metrics  ARGV[5] number of queues  ARGV[6..] their names,
  in KEYS order
  A is the index of the script's own first ARGV; XK of its own first extra KEY.
  Scripts that only touch running attempts (start, heartbeat) may pass no queues. ]]

local J, T, H, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local LEASES, CLAIMS, LEADER, LWAKE, DLQ = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local ACTIVE, EXPIRING, IDEM, NOTIFY = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local JOB_ID = ARGV[1]
local DEFAULT_RETENTION_MS = tonumber(ARGV[2])
local NQ = tonumber(ARGV[5])
local STATE_INDEX = {} -- job state -> the zset of jobs in that state (what `list --state` reads)
for k, state in ipairs(JOB_STATES) do STATE_INDEX[state] = KEYS[13 + k] end
-- KEYS[14 + #JOB_STATES] is the packed record (named P by the scripts that touch it).
-- the shard's limit keys (_slots.lua's table: the main chunk may hold at most 200 locals)
SL.keys = {limits = KEYS[15 + #JOB_STATES], slots = KEYS[16 + #JOB_STATES],
  parked = KEYS[17 + #JOB_STATES], freed = KEYS[18 + #JOB_STATES], wake = KEYS[19 + #JOB_STATES]}
-- Events and metrics (one table, for the same reason).
OBS.events, OBS.metrics = KEYS[20 + #JOB_STATES], KEYS[21 + #JOB_STATES]
OBS.maxlen, OBS.metrics_on, OBS.counts = tonumber(ARGV[3]), ARGV[4] == '1', {}
OBS.maxlen_arg = ARGV[3] -- as XADD gets it: a number would be formatted by each call
local QK = 21 + #JOB_STATES -- the queue keys follow
local QUEUES = {}
for qi = 1, NQ do
  local k = QK + (qi - 1) * 3
  QUEUES[ARGV[5 + qi]] = {ready = KEYS[k + 1], delayed = KEYS[k + 2], wake = KEYS[k + 3]}
end
local A = 6 + NQ
local XK = QK + 1 + NQ * 3

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
  J, T, H, F, IDEM = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  JOB_ID, META = job_id, {}
end

-- Read the job's fields; false when the job hash does not exist (META.refusal: JOB_GONE), or
-- when a newer release wrote it (NEWER_PROTOCOL): this one must not change what it may not
-- understand (its queue entries, say, which it could not even find). Called before any write.
local function load_job()
  local m = redis.call('HMGET', J, JF.STATE, JF.QUEUE, JF.PRIORITY, JF.SEQ, JF.QUEUES,
    JF.TRIGGER_RULES, JF.PACKED, JF.TASKS, JF.NAME, JF.IDEMPOTENCY_KEY, JF.LEFT, JF.PROTOCOL)
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
          left = tonumber(m[11] or 0)}
  return true
end

-- A job of n tasks: its tasks hash as a hash table once n is large enough (schema.py). A
-- job's first starts (start.lua, while none of its tasks ended) convert it, not its submit:
-- a job waiting in a backlog keeps the compact form until it runs.
local function tasks_as_hashtable(n)
  if n >= TASKS_HASHTABLE_MIN_TASKS then as_hashtable(T) end
end

-- Every queue the job's tasks may enter, and its idempotency key, were passed in KEYS
-- (checked before any write).
local function queues_passed()
  for name in string.gmatch(META.queues, '[^,]+') do
    if not QUEUES[name] then return false end
  end
  if IDEM ~= J then return true end
  if META.idem == nil then return redis.call('HEXISTS', J, JF.IDEMPOTENCY_KEY) == 0 end
  return not META.idem -- read by load_job
end

-- Task i's reservation or attempt ended (its lease is dropped): give its pool and limit
-- slots back. Every transition that removes a lease calls this; it acts once.
function SL.free_slots(i)
  local k = SL.keys
  SL.free_slots_of(k.limits, k.slots, k.freed, k.wake, JOB_ID .. '|' .. i)
end

-- Limit `id` has room again: wake the workers of this job's queues where tasks are parked
-- waiting for it (parked entries sort by queue, then limit), so the worker that serves them
-- claims them now rather than at its idle poll.
function SL.wake_parked_queues(id, n)
  for qname, queue in pairs(QUEUES) do
    if SL.first_parked(SL.keys.parked, qname, id) then wake(queue.wake, n) end
  end
end

-- The job is gone (expired, deleted): drop the leases and claims of the task indexes
-- ARGV[first..], and give back their slots, so nothing keeps pointing at it.
local function drop_reservations(first)
  for k = first, #ARGV do
    redis.call('ZREM', LEASES, JOB_ID .. '|' .. ARGV[k])
    redis.call('HDEL', CLAIMS, JOB_ID .. '|' .. ARGV[k])
    SL.free_slots(ARGV[k])
  end
end

-- Set the job's state and move the job to that state's index, in one step, so `list --state`
-- reads exactly the jobs in that state.
local function set_job_state(state)
  local j = redis.call('HMGET', J, JF.STATE, JF.CREATED_AT)
  if j[1] and j[1] ~= state then redis.call('ZREM', STATE_INDEX[j[1]], JOB_ID) end
  redis.call('ZADD', STATE_INDEX[state], j[2], JOB_ID)
  redis.call('HSET', J, JF.STATE, state)
  META.state = state
end

-- The job's entry in the expiring zset: what trimming needs once the job's keys are gone.
local function expiring_member()
  local j = redis.call('HMGET', J, JF.OWNER, JF.SCHEDULE_ID)
  return JOB_ID .. '\t' .. (j[1] or '') .. '\t' .. (j[2] or '')
end

-- The one way a transition says what it did: an entry in the shard's event stream, capped
-- near OBS.maxlen (trimmed by whole stream nodes: cheap). Its id is the Redis time. i is
-- a task index (false for the job's own events); extra holds more field, value pairs (EF.).
function OBS.emit(kind, i, extra)
  if OBS.maxlen <= 0 then return end
  local entry = {EF.KIND, kind, EF.JOB, JOB_ID}
  if i then
    entry[5] = EF.INDEX
    entry[6] = i
  end
  for _, v in ipairs(extra or {}) do entry[#entry + 1] = v end
  redis.call('XADD', OBS.events, 'MAXLEN', '~', OBS.maxlen_arg, '*', unpack(entry))
end

-- Many tasks' events of one kind in one entry, as the hot path makes them (a batch of
-- starts, completions, tasks queued): EF.INDEX lists the indexes, EF.ATTEMPT (when given)
-- their attempts, comma-separated; readers expand it into one event per task.
function OBS.emit_many(kind, indexes, attempts, extra)
  if OBS.maxlen <= 0 or #indexes == 0 then return end
  local entry = {EF.KIND, kind, EF.JOB, JOB_ID, EF.INDEX, table.concat(indexes, ',')}
  if attempts then
    entry[7] = EF.ATTEMPT
    entry[8] = table.concat(attempts, ',')
  end
  for _, v in ipairs(extra or {}) do entry[#entry + 1] = v end
  redis.call('XADD', OBS.events, 'MAXLEN', '~', OBS.maxlen_arg, '*', unpack(entry))
end

-- An attempt's fields for an event (attempt, handler) and, when given, its error, short.
function OBS.attempt_of(i, err)
  local a = redis.call('HMGET', T, TF_ATTEMPTS .. i, TF_HANDLER .. i)
  local extra = {EF.ATTEMPT, a[1] or '0', EF.HANDLER, a[2] or ''}
  if err then
    extra[5] = EF.ERROR
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
  if added then keep_hashtable(OBS.metrics, redis.call('HLEN', OBS.metrics)) end
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
  OBS.count(bucket_prefix .. '\t' .. bucket)
  OBS.count(sum_field, ms)
end

-- The payload is msgpack of a map whose first key is PK.TASK (layout.py writes it first): the
-- task name is the string right after it, read here without unpacking the arguments.
function OBS.payload_task_name(p)
  local TASK_KEY = string.char(160 + #PK.TASK) .. PK.TASK -- the key as a msgpack fixstr
  if not p or string.sub(p, 2, 1 + #TASK_KEY) ~= TASK_KEY then return nil end
  local at = 2 + #TASK_KEY -- the name's msgpack header
  local b = string.byte(p, at)
  if b >= 160 and b <= 191 then return string.sub(p, at + 1, at + b - 160) end -- fixstr
  if b == 217 then return string.sub(p, at + 2, at + 1 + string.byte(p, at + 1)) end -- str 8
  return nil
end

local function task_state(i) return redis.call('HGET', T, TF_STATE .. i) end
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
  local f = redis.call('HMGET', T, TF_RANK .. i, TF_LIMITS .. i)
  return member_of(i, f[1], f[2])
end
-- A queued task leaving its queue without a claim (cancel, abandon) leaves the parked zset
-- too, if it waits there for a full limit.
function SL.unpark(i) SL.unpark_of(SL.keys.limits, SL.keys.parked, lease_member(i)) end
local function task_queue(i) return redis.call('HGET', T, TF_QUEUE .. i) or META.queue end
local function task_priority(i)
  local p = redis.call('HGET', T, TF_PRIORITY .. i)
  if p then return tonumber(p) end
  return META.priority
end
-- Where task i stands in its queue's order, as one string that sorts the way the queue does
-- (priority, then its member): a worker runs the tasks it holds in this order. (priority,
-- member: when the caller has them.)
function OBS.run_order(i, priority, member)
  return string.format('%010d', 1000000000 - (priority or task_priority(i))) .. '|'
    .. (member or queue_member(i))
end
-- What a worker holding task i must know of its children (csv: its TF_CHILDREN, false for
-- none): 0, none; else the run order of its first child, before which the worker may prefetch
-- (a thread freed while i runs starts what it holds in run order, so nothing held may come
-- after a child i releases later); 1 past OBS.CHILDREN_ORDERED children (not read: the
-- worker prefetches nothing while it holds i).
OBS.CHILDREN_ORDERED = 8
function OBS.children_after(csv)
  if not csv then return 0 end
  local first, n = nil, 0
  for c in string.gmatch(csv, '[^,]+') do
    n = n + 1
    if n > OBS.CHILDREN_ORDERED then return 1 end
    local f = redis.call('HMGET', T, TF_PRIORITY .. c, TF_RANK .. c, TF_LIMITS .. c)
    local order = OBS.run_order(c, tonumber(f[1]) or META.priority, member_of(c, f[2], f[3]))
    if not first or order < first then first = order end
  end
  return first or 0
end
local function max_attempts(i) return tonumber(redis.call('HGET', T, TF_MAX_ATTEMPTS .. i) or 1) end
-- Task i's fencing token, "<attempt>:<handler>:<nonce>" of its current attempt (the nonce:
-- random, drawn by the worker for the claim that started it, so no two claims share a token,
-- whatever counters Redis loses), and its fields {attempt, handler, nonce}.
local function token_of(i)
  local a = redis.call('HMGET', T, TF_ATTEMPTS .. i, TF_HANDLER .. i, TF_NONCE .. i)
  return (a[1] or '0') .. ':' .. (a[2] or '') .. ':' .. (a[3] or ''), a
end
-- Why a report under `token` is refused when it is not the task's current one (a: the task's
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
-- nil when `handler` reports under task i's current token, else the code refusing the report
-- (refusal_of); and the task's attempt, handler and nonce.
local function token_refusal(i, token, handler)
  local current, a = token_of(i)
  if current == token and a[2] == handler then return nil, a end
  return refusal_of(token, a), a
end

-- Tasks first..last (indexes) were just written by the split: record when (seed 000's
-- creation time of a subtask; its last-modified time is this too until a transition).
local function stamp_created(first, last, now)
  local fields = {}
  for i = first, last do
    fields[#fields + 1] = TF_CREATED_AT .. i
    fields[#fields + 1] = now
  end
  call_chunked('HSET', T, fields)
end

-- Labels of task i's metrics: its queue and task name ('?' when its payload is gone).
function OBS.task_labels(i, name)
  name = name or OBS.payload_task_name(redis.call('HGET', T, TF_PAYLOAD .. i)) or '?'
  return task_queue(i) .. '\t' .. name
end

-- Task i ended in `state` (a terminal one): counted by queue, task name and state (labels:
-- OBS.task_labels(i), when the caller has them).
function OBS.count_finished(i, state, labels)
  if OBS.metrics_on then OBS.count(MF.FINISHED .. '\t' .. (labels or OBS.task_labels(i)) .. '\t' .. state) end
end

-- An attempt of task i ran from `started` until now: its run time, by queue and task name.
function OBS.observe_run(i, started, now, labels)
  if not (OBS.metrics_on and started) then return end
  labels = labels or OBS.task_labels(i)
  OBS.observe(MF.RUN .. '\t' .. labels, MF.RUN_SUM .. '\t' .. labels, math.max(0, now - tonumber(started)))
end

-- A task of queue qname starts: its queue wait, from when it was queued, or for a retry from
-- its last attempt's end (so a retry's backoff counts as waiting).
function OBS.observe_wait(qname, queued, last_ended, now)
  if not (OBS.metrics_on and queued) then return end
  local since = math.max(tonumber(queued), tonumber(last_ended or 0))
  OBS.observe(MF.WAIT .. '\t' .. qname, MF.WAIT_SUM .. '\t' .. qname, math.max(0, now - since))
end
-- Run-time fan-out (_data.lua defines them): enqueue's hook for mapped tasks, and the
-- frontier's expansion step.
local map_ready, map_expand

local pending_wakes = {}
OBS.queued = {} -- indexes queued by this call: one event, written by flush_wakes
local function enqueue(i, now)
  -- what it needs of the task, in one read
  local f = redis.call('HMGET', T, TF_MAP_ARG .. i, TF_QUEUE .. i, TF_PRIORITY .. i, TF_RANK .. i,
    TF_LIMITS .. i)
  if f[1] and map_ready(i, now) then return end -- a mapped task is expanded or joined, never queued
  local qname = f[2] or META.queue
  redis.call('HSET', T, TF_STATE .. i, T_QUEUED, TF_QUEUED_AT .. i, now, TF_UPDATED_AT .. i, now)
  local priority = tonumber(f[3]) or META.priority
  redis.call('ZADD', QUEUES[qname].ready, -priority, member_of(i, f[4], f[5]))
  pending_wakes[qname] = (pending_wakes[qname] or 0) + 1
  OBS.queued[#OBS.queued + 1] = i
end
-- enqueue() for those of tasks `indexes` still waiting (a split's ready tasks): one read
-- per task, then one HSET for them all and one ZADD per queue.
local function enqueue_waiting(indexes, now)
  local fields, entries = {}, {}
  for _, i in ipairs(indexes) do
    local f = redis.call('HMGET', T, TF_STATE .. i, TF_MAP_ARG .. i, TF_QUEUE .. i,
      TF_PRIORITY .. i, TF_RANK .. i, TF_LIMITS .. i)
    if f[1] == T_WAITING and f[2] then
      enqueue(i, now) -- a mapped task: expanded or joined, never queued
    elseif f[1] == T_WAITING then
      local qname = f[3] or META.queue
      local n = #fields
      fields[n + 1], fields[n + 2] = TF_STATE .. i, T_QUEUED
      fields[n + 3], fields[n + 4] = TF_QUEUED_AT .. i, now
      fields[n + 5], fields[n + 6] = TF_UPDATED_AT .. i, now
      local queued = entries[qname] or {}
      entries[qname] = queued
      queued[#queued + 1] = -(tonumber(f[4]) or META.priority)
      queued[#queued + 1] = member_of(i, f[5], f[6])
      pending_wakes[qname] = (pending_wakes[qname] or 0) + 1
      OBS.queued[#OBS.queued + 1] = i
    end
  end
  call_chunked('HSET', T, fields)
  for qname, queued in pairs(entries) do call_chunked('ZADD', QUEUES[qname].ready, queued) end
end
-- After enqueue(): wake idle workers, say which tasks were queued, write the counts.
local function flush_wakes()
  for qname, n in pairs(pending_wakes) do wake(QUEUES[qname].wake, n) end
  pending_wakes = {}
  OBS.emit_many(EV.QUEUED, OBS.queued)
  OBS.queued = {}
  OBS.flush_counts()
end

-- A message for whichever worker plays leader next: split, continue, finalize, cancel.
local function leader_message(kind, due)
  redis.call('ZADD', LEADER, due, kind .. '|' .. JOB_ID)
  wake(LWAKE, 1)
end

-- History entries: "index, attempt, state, handler, started, finished, error" tab-separated.
local function append_history(entries)
  if #entries == 0 then return end
  local length = 0
  for first = 1, #entries, ARGS_PER_CALL_MAX do
    length = redis.call('RPUSH', H, unpack(entries, first,
      math.min(#entries, first + ARGS_PER_CALL_MAX - 1)))
  end
  if length > HISTORY_MAX then redis.call('LTRIM', H, -HISTORY_MAX, -1) end
end

local function record_history(i, state, now, err)
  local a = redis.call('HMGET', T, TF_ATTEMPTS .. i, TF_HANDLER .. i, TF_STARTED_AT .. i)
  append_history({table.concat({i, a[1] or '0', state, a[2] or '', a[3] or '', now, err or ''},
    '\t')})
end

-- A finished job whose releases and cascades are all done never changes again (until a
-- retry): hand it to a leader, who packs its tasks and history into one record
-- (storage/packed.py) and swaps it in with compact.lua. Packing in Python keeps that work
-- off Redis's one thread. Called at the end of every script that may finalize a job.
-- (Lua allows 200 locals per script and the preludes use most: no table for the states.)
local function compact_when_settled(now)
  local state = META.state
  if (state ~= J_SUCCEEDED and state ~= J_FAILED and state ~= J_CANCELLED) or META.packed
      or redis.call('EXISTS', F) == 1 then
    return
  end
  -- posted once: a late report on the finished job stays a no-op
  if redis.call('ZSCORE', LEADER, 'compact|' .. JOB_ID) then return end
  leader_message('compact', now)
end

-- The job asked to be told of this final state (spec `notify:`): record a due delivery per
-- channel, in the finalizing script itself, so no finished job misses its notification.
-- A delivery still under way for an earlier outcome (a retried job) carries on as it is.
local function queue_notifications(state, now)
  local j = redis.call('HMGET', J, JF.NOTIFY_ON, JF.NOTIFY_TO)
  if not j[1] or not string.find(',' .. j[1] .. ',', ',' .. state .. ',', 1, true) then return end
  for channel in string.gmatch(j[2] or '', '[^,]+') do
    redis.call('ZADD', NOTIFY, 'NX', now, channel .. '|' .. JOB_ID)
  end
end

-- Close a job whose tasks all ended: succeeded only if every task succeeded; cancelled if a
-- user cancelled it; else failed (or failed whatever its tasks did: `failed`, for a job
-- whose tasks Redis lost). Its keys then live for the retention period.
local function finalize_job(now, failed)
  local j = redis.call('HMGET', J, JF.FAILED, JF.STOP, JF.RETENTION)
  local state = J_SUCCEEDED
  if j[2] == 'cancel' then
    state = J_CANCELLED
  elseif failed or tonumber(j[1] or 0) > 0 then
    state = J_FAILED
  end
  set_job_state(state)
  OBS.emit(EV.FINALIZED, false, {EF.DETAIL, state})
  OBS.count(MF.JOBS .. '\t' .. state)
  redis.call('HSET', J, JF.FINISHED_AT, now, JF.UPDATED_AT, now)
  redis.call('ZREM', ACTIVE, JOB_ID)
  redis.call('ZREM', LEADER, 'finalize|' .. JOB_ID)
  local retention = tonumber(j[3] or DEFAULT_RETENTION_MS)
  for _, key in ipairs({J, T, H, F}) do redis.call('PEXPIRE', key, retention) end
  if IDEM ~= J then redis.call('PEXPIRE', IDEM, retention) end
  redis.call('ZADD', EXPIRING, now + retention, expiring_member())
  queue_notifications(state, now)
  return state
end

-- Whether Redis lost the job's tasks hash (evicted under a maxmemory-policy other than
-- noeviction, or deleted by hand): its tasks were written (it runs, or a split wrote some),
-- no packed record took their place, and task 0, the first one written, is not there. (Its
-- first field, not the key: a leader's next split chunk would create the hash again.)
local function tasks_lost()
  if META.packed or META.state == J_SUCCEEDED or META.state == J_FAILED
      or META.state == J_CANCELLED then
    return false
  end
  if META.state ~= J_RUNNING and tonumber(redis.call('HGET', J, JF.WRITTEN) or 0) == 0 then
    return false
  end
  return redis.call('HEXISTS', T, TF_STATE .. 0) == 0
end

-- End a job whose tasks Redis lost (tasks_lost): none of them can run or be counted any
-- more, so the job ends now, failed (cancelled under a user's cancel), its error naming the
-- lost key. What is left of its tasks and frontier goes, and its split, continue and cancel
-- messages; a queue entry or lease of its tasks is dropped by the script that meets it
-- (start, expire: the task is gone). Returns the job's final state.
local function settle_lost(now)
  local err = 'lost: Redis no longer holds the tasks hash ' .. T
    .. ' (evicted? jobcenter needs maxmemory-policy noeviction)'
  OBS.emit(EV.REPAIRED, false, {EF.DETAIL, 'lost', EF.ERROR, string.sub(err, 1, OBS.error_max)})
  OBS.count(MF.REPAIRS .. '\tlost')
  for _, kind in ipairs({'split', 'continue', 'cancel'}) do
    redis.call('ZREM', LEADER, kind .. '|' .. JOB_ID)
  end
  redis.call('DEL', T, F)
  local left = tonumber(redis.call('HGET', J, JF.LEFT) or 0)
  redis.call('HINCRBY', J, JF.FAILED, left)
  redis.call('HSET', J, JF.ERROR, err, JF.LEFT, 0)
  local state = finalize_job(now, true)
  OBS.flush_counts()
  return state
end

-- One more task (or `count` more) is terminal; the last one finalizes the job.
local function task_finished(now, count)
  redis.call('HSET', J, JF.UPDATED_AT, now)
  META.updated_at = now
  if redis.call('HINCRBY', J, JF.LEFT, -(count or 1)) == 0 then finalize_job(now) end
end

-- Schedule a visit of i's children, telling each how i ended: 'r' succeeded, 'f' failed or
-- upstream_failed, 'k' skipped (parent_ended).
-- ('x' entries expand a mapped task: _data.lua.)
local function push_frontier(kind, i, origin)
  if redis.call('HEXISTS', T, TF_CHILDREN .. i) == 1 then
    redis.call('RPUSH', F, kind .. '|' .. i .. '|' .. origin .. '|1')
  end
end

-- Trigger rules (jobcenter/model/trigger_rules.py; ARCHITECTURE.md, "Trigger rules").
-- A parent's end reaches each child as 'r' (succeeded), 'f' (failed or upstream_failed) or
-- 'k' (skipped). The child counts it and, once its rule is decided, runs (queued), or ends
-- skipped or upstream_failed and passes that on to its own children the same way.

-- What the rule makes of the parents so far: 'run', 'skip', 'fail' (upstream_failed) or nil
-- (not decided yet). np parents, d not succeeded, u not ended, nf failed, nk skipped. A rule
-- that can no longer be met fails at once when a parent failed; without one it waits for
-- every parent to end, so the state a task ends in never depends on the order they end in.
local function rule_verdict(rule, np, d, u, nf, nk)
  local s = np - d -- parents succeeded
  local met, hopeless
  if rule == R_ALL_DONE then
    met = u == 0
  elseif rule == R_ALL_FAILED then
    met, hopeless = u == 0 and nf == np, s > 0 or nk > 0
  elseif rule == R_ONE_SUCCESS then
    met, hopeless = s > 0, u == 0
  elseif rule == R_ONE_FAILED then
    met, hopeless = nf > 0, u == 0
  elseif rule == R_NONE_FAILED then
    met, hopeless = u == 0 and nf == 0, nf > 0
  else -- all_success
    met, hopeless = d == 0, nf + nk > 0
  end
  if met then return 'run' end
  if hopeless and nf > 0 then return 'fail' end
  if hopeless and u == 0 then return 'skip' end
  return nil
end

-- Waiting task c will not run: it ends `state` (upstream_failed or skipped) and its
-- children hear of it through the frontier.
local function end_unrun(c, state, origin, now, err)
  redis.call('HSET', T, TF_STATE .. c, state, TF_FINISHED_AT .. c, now, TF_UPDATED_AT .. c, now,
    TF_ERROR .. c, err)
  OBS.emit(state == T_SKIPPED and EV.SKIPPED or EV.UPSTREAM_FAILED, c, {EF.ERROR, err})
  OBS.count_finished(c, state)
  if state == T_SKIPPED then
    redis.call('HINCRBY', J, JF.SKIPPED, 1)
    push_frontier('k', c, origin)
  else
    redis.call('HINCRBY', J, JF.FAILED, 1)
    push_frontier('f', c, origin)
  end
  task_finished(now)
end

local function release(c, now, take)
  if not (take and take(c, now)) then enqueue(c, now) end
end

local function task_name(i) return redis.call('HGET', T, TF_ID .. i) or i end

-- Act on a waiting task's verdict: queue it (or let `take` run it), or end it unrun. kind:
-- how the parent whose end decided it ended (nil: a repair).
local function act_on_verdict(c, rule, verdict, kind, origin, now, take)
  if verdict == 'run' then
    release(c, now, take)
  elseif verdict == 'fail' and kind == 'f' then -- passed on: named after the task that failed
    end_unrun(c, T_UPSTREAM_FAILED, origin, now, 'upstream task ' .. task_name(origin) .. ' failed')
  elseif verdict == 'fail' then
    end_unrun(c, T_UPSTREAM_FAILED, c, now, 'trigger rule ' .. rule .. ' cannot be met: a parent failed')
  elseif verdict == 'skip' and kind == 'k' and rule == R_ALL_SUCCESS then
    end_unrun(c, T_SKIPPED, origin, now, 'upstream task ' .. task_name(origin) .. ' skipped')
  elseif verdict == 'skip' then
    end_unrun(c, T_SKIPPED, c, now, 'trigger rule ' .. rule .. ' not met')
  end
end

-- A parent of task c ended (kind 'r', 'f' or 'k'; origin: the task whose failure or skip
-- this passes on). Every task counts its parents not succeeded (d). In a job without a
-- trigger rule nothing else is counted or read: its releases cost what they did before
-- rules existed. Otherwise the other counters are kept once a parent ended other than by
-- succeeding, or from the start for a task with a rule.
local function parent_ended(kind, c, origin, now, take)
  local d = nil
  if kind == 'r' then d = redis.call('HINCRBY', T, TF_DEPS_LEFT .. c, -1) end
  if not META.rules then -- every task all_success, so no task is ever skipped
    if (kind == 'f' or d == 0) and task_state(c) == T_WAITING then
      if kind == 'r' then return release(c, now, take) end
      end_unrun(c, T_UPSTREAM_FAILED, origin, now, 'upstream task ' .. task_name(origin) .. ' failed')
    end
    return
  end
  local f = redis.call('HMGET', T, TF_STATE .. c, TF_TRIGGER_RULE .. c, TF_PARENTS_LEFT .. c)
  local state, rule, u = f[1], f[2], f[3]
  if not rule and not u then -- all_success, every parent so far succeeded
    if state ~= T_WAITING then return end
    if kind == 'r' then
      if d == 0 then release(c, now, take) end
      return
    elseif kind == 'f' then
      return end_unrun(c, T_UPSTREAM_FAILED, origin, now, 'upstream task ' .. task_name(origin) .. ' failed')
    end
  end
  d = d or tonumber(redis.call('HGET', T, TF_DEPS_LEFT .. c) or 0)
  if u then
    u = redis.call('HINCRBY', T, TF_PARENTS_LEFT .. c, -1)
  elseif kind == 'r' then
    u = d -- absent: no parent ended other than by succeeding
  else
    u = d - 1
    redis.call('HSET', T, TF_PARENTS_LEFT .. c, u)
  end
  if kind == 'f' then redis.call('HINCRBY', T, TF_PARENTS_FAILED .. c, 1) end
  if kind == 'k' then redis.call('HINCRBY', T, TF_PARENTS_SKIPPED .. c, 1) end
  if state ~= T_WAITING then return end
  local n = redis.call('HMGET', T, TF_PARENTS .. c, TF_PARENTS_FAILED .. c, TF_PARENTS_SKIPPED .. c)
  rule = rule or R_ALL_SUCCESS
  local verdict = rule_verdict(rule, tonumber(n[1] or 0), d, u, tonumber(n[2] or 0), tonumber(n[3] or 0))
  act_on_verdict(c, rule, verdict, kind, origin, now, take)
end

-- Parents of task c (indexes ARGV[first..last]) counted from their states, for a repair or
-- a revive: {np, d, u, nf, nk}; a parent in `reviving` counts as not ended. Reads only.
local FAILED_ENDS = {[T_FAILED] = true, [T_UPSTREAM_FAILED] = true, [T_CANCELLED] = true}
local function count_parents(first, last, reviving)
  local d, u, nf, nk = 0, 0, 0, 0 -- as in rule_verdict
  for k = first, last do
    local p = ARGV[k]
    local state = task_state(p)
    if reviving[p] or state ~= T_SUCCEEDED then d = d + 1 end -- it is to succeed again
    if reviving[p] or not (state == T_SUCCEEDED or state == T_SKIPPED or FAILED_ENDS[state]) then
      u = u + 1
    elseif state == T_SKIPPED then
      nk = nk + 1
    elseif state ~= T_SUCCEEDED then
      nf = nf + 1
    end
  end
  return {np = last - first + 1, d = d, u = u, nf = nf, nk = nk}
end

-- The verdict of task c's rule on counts from count_parents, and the rule.
local function parents_verdict(c, counts)
  local rule = redis.call('HGET', T, TF_TRIGGER_RULE .. c) or R_ALL_SUCCESS
  return rule_verdict(rule, counts.np, counts.d, counts.u, counts.nf, counts.nk), rule
end

local function store_parent_counts(c, counts)
  redis.call('HSET', T, TF_DEPS_LEFT .. c, counts.d, TF_PARENTS_LEFT .. c, counts.u,
    TF_PARENTS_FAILED .. c, counts.nf, TF_PARENTS_SKIPPED .. c, counts.nk)
end

-- Visit children from the frontier, at most `budget` of them (default FRONTIER_BUDGET); what
-- is left waits for a 'continue' leader message, so a 100,000-child fan-out never blocks
-- Redis for long.
local function drain_frontier(now, take, budget)
  local emptied = false
  budget = budget or FRONTIER_BUDGET
  while budget > 0 do
    local entry = redis.call('LPOP', F)
    emptied = not entry
    if emptied then break end
    local kind, i, origin, pos = string.match(entry, '^(%a)|(%d+)|(%d+)|(%d+)$')
    if kind == 'x' then budget = map_expand(i, budget, now) end -- writes instances instead
    local csv = kind ~= 'x' and redis.call('HGET', T, TF_CHILDREN .. i) or ''
    pos = tonumber(pos)
    while budget > 0 do
      local s, e = string.find(csv, '[^,]+', pos)
      if not s then break end
      local c = string.sub(csv, s, e)
      pos = e + 2
      budget = budget - 1
      parent_ended(kind, c, origin, now, take)
    end
    if string.find(csv, '[^,]+', pos) then
      redis.call('LPUSH', F, kind .. '|' .. i .. '|' .. origin .. '|' .. pos)
    end
  end
  flush_wakes()
  if not emptied and redis.call('EXISTS', F) == 1 then
    -- Releases go on after a job is finalized too (they keep every dependency counter
    -- equal to the parents not yet succeeded, which a later retry relies on); a list
    -- re-created by the push-back above must expire with the job.
    local ttl = redis.call('PTTL', J)
    if ttl > 0 then redis.call('PEXPIRE', F, ttl) end
    leader_message('continue', now)
  end
  compact_when_settled(now)
end

-- Terminal failure of task i: record it (and dead-letter it), then cascade to every
-- descendant.
local function fail_task(i, now, err)
  OBS.emit(EV.FAILED, i, OBS.attempt_of(i, err))
  OBS.count_finished(i, T_FAILED)
  redis.call('HSET', T, TF_STATE .. i, T_FAILED, TF_FINISHED_AT .. i, now, TF_UPDATED_AT .. i, now, TF_ERROR .. i, err)
  redis.call('HDEL', T, TF_WAITING_FOR .. i) -- no longer waiting for a worker (give_back.lua)
  redis.call('ZREM', LEASES, lease_member(i))
  SL.free_slots(i)
  redis.call('ZADD', DLQ, now, lease_member(i))
  redis.call('HINCRBY', J, JF.FAILED, 1)
  record_history(i, T_FAILED, now, err)
  push_frontier('f', i, i)
  task_finished(now)
end
