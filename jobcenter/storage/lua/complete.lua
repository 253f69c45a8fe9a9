--[[ complete: running -> succeeded for a batch of tasks of one or more jobs of one shard, each
  job's part its own transition (one call for many: the call's cost is paid once); release
  each child whose last dependency this was, exactly once. A released child on a queue this
  worker serves may be taken at once (it starts running here, skipping the queue round trip).
  Then, while it may take more, it takes the next ready tasks of the job from the head of the
  queues this worker serves, as its next claim would (a flat job's completions start its next
  tasks in the same call: one round trip, not three). Each success updates the learned run
  time of its job name + task id and of its task name, from the run time the worker measured.
  KEYS: the job context (_job.lua) of the first job, with the queues of every job of the call;
  then KEYS[FIRST_OWN_KEY] the shard's learned-estimates hash; then 5 per further job: its hash,
  tasks hash, history, frontier, idempotency key (its hash again when it has none)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] the call's nonce, for the attempts it starts
  (start.lua)
  ARGV[FIRST_OWN_ARG+2] lease ms  ARGV[FIRST_OWN_ARG+3] tasks to take, for the whole call
  (released children, then queued ones): "<free>" into free slots, or "<free>+<extra>" with a
  prefetch (NEXT.may_take), then "@<run order>" when the worker holds tasks with children: it
  prefetches only tasks before it
  ARGV[FIRST_OWN_ARG+4] number of queues the worker serves  ARGV[FIRST_OWN_ARG+5..] their names
  then the number of jobs, and per job (the first is the context's): its id, its number of
  tasks, then per task: its index, fencing token (_job.lua token_of), result (msgpack bytes,
  stored with the success; '' for None: nothing stored) and run time in ms as the worker
  measured it from its thread's start ('' when unknown: Redis time since its start, wait for a
  thread included)
  Returns per job, in order: {0, {code per task}, {{index, attempt, payload, inputs, run order,
          children} per taken task} (as one msgpack string: MSGPACK.tasks)} | {-4}
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
          | {-5} | the error its part raised | false: not run, after a part that raised
  Codes: 0 completed | 1 this attempt completed already | -2 stale token | -3 not running
  | -9 an attempt Redis never started: it lost writes (refusal_of) ]]

local handler, nonce = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1]
local lease_ms = tonumber(ARGV[FIRST_OWN_ARG + 2])
-- "<free>" or "<free>+<extra>": tasks to take into free slots, and beyond them (a prefetch)
-- (what one job's part gathers is reset by NEXT.begin_job)
local NEXT = {seen_empty = {}}
local take_left = tonumber(string.match(ARGV[FIRST_OWN_ARG + 3], '^%d+'))
NEXT.extra = tonumber(string.match(ARGV[FIRST_OWN_ARG + 3], '^%d+%+(%d+)') or 0)
NEXT.before = string.match(ARGV[FIRST_OWN_ARG + 3], '@(.+)$') -- nil: no bound
take_left = take_left + NEXT.extra
local nserved = tonumber(ARGV[FIRST_OWN_ARG + 4])
local served = {}
for k = FIRST_OWN_ARG + 5, FIRST_OWN_ARG + 4 + nserved do served[ARGV[k]] = true end
local first_job = FIRST_OWN_ARG + 5 + nserved

local now = now_ms()
-- the times it writes, as text once: a number sent to Redis is formatted by every call
NEXT.now, NEXT.lease_until = tostring(now), tostring(now + lease_ms)
-- the learned estimates, in one table (the main chunk may hold at most 200 locals):
-- weight: of the newest run in the moving average, a few runs adapt it; max: fields per
-- shard, past this only known ones are updated
local ESTIMATES = {key = KEYS[FIRST_OWN_KEY], weight = 0.3, max = 100000}

-- A succeeded run (ms, Redis time) to fold into a moving average (jobcenter/model/ordering.py);
-- ESTIMATES.flush() writes the batch's runs with one read and one write of the hash.
ESTIMATES.runs = {}
function ESTIMATES.learn(field, ms)
  ESTIMATES.runs[#ESTIMATES.runs + 1] = field
  ESTIMATES.runs[#ESTIMATES.runs + 1] = ms
end

function ESTIMATES.flush()
  if #ESTIMATES.runs == 0 then return end
  local fields, value = {}, {}
  for k = 1, #ESTIMATES.runs, 2 do
    if value[ESTIMATES.runs[k]] == nil then
      fields[#fields + 1] = ESTIMATES.runs[k]
      value[ESTIMATES.runs[k]] = false
    end
  end
  local old = redis.call('HMGET', ESTIMATES.key, unpack(fields))
  local room = nil -- new fields it may still take (counted only when one is new)
  for k, field in ipairs(fields) do
    value[field] = tonumber(old[k]) or false
    if not (value[field] or room) then room = ESTIMATES.max - redis.call('HLEN', ESTIMATES.key) end
  end
  local added = room ~= nil -- room is counted only when a field is new
  room = room or 0
  for k = 1, #ESTIMATES.runs, 2 do
    local field, ms = ESTIMATES.runs[k], ESTIMATES.runs[k + 1]
    local v = value[field]
    if v then
      value[field] = v + ESTIMATES.weight * (ms - v)
    elseif room > 0 then -- past ESTIMATES.max fields, only known ones are updated
      room = room - 1
      value[field] = ms
    end
  end
  local writes = {}
  for _, field in ipairs(fields) do
    if value[field] then
      writes[#writes + 1] = field
      writes[#writes + 1] = string.format('%.1f', value[field])
    end
  end
  call_chunked('HSET', ESTIMATES.key, writes)
  if added then keep_hashtable(ESTIMATES.key, ESTIMATES.max - room) end -- room: what is left now
end

-- ran_ms: the run time the worker measured; a task held beyond the free slots (a prefetch)
-- started in Redis before its wait for a thread, which Redis time would count as running.
function ESTIMATES.learn_run(i, started, task_name, task_id, ran_ms)
  if not started then return end
  local ms = tonumber(ran_ms) or math.max(0, now - tonumber(started))
  -- the instances of a mapped task (`<id>[<n>]`) share their task's estimate
  local id = task_id or i
  if string.byte(id, -1) == 93 then id = string.gsub(id, '%[%d+%]$', '') end -- ends in ']'
  ESTIMATES.learn('j\t' .. META.name .. '\t' .. id, ms)
  if task_name then ESTIMATES.learn('t\t' .. task_name, ms) end
end

-- The tasks the job's part of the call took (NEXT.begin_job starts each job's list).
local taken = {}
-- Take a released child only if it would be the next claimed from its queue anyway: the
-- shortcut must never jump ahead of a higher-priority or older ready task. A paused job
-- starts nothing more here (its tasks wait, parked by the claims that meet them).
local function take(c)
  NEXT.released[c] = true
  if take_left <= 0 or META.paused then return false end
  -- everything this needs of the child, in one read
  local f = redis.call('HMGET', TASKS, TF_QUEUE .. c, TF_LIMITS .. c, TF_MAP_ARG .. c,
    TF_PRIORITY .. c, TF_RANK .. c, TF_CHILDREN .. c, TF_ATTEMPTS .. c, TF_PAYLOAD .. c,
    TF_INPUTS .. c, TF_MAP_OF .. c, TF_ERROR .. c, TF_FINISHED_AT .. c, TF_PROGRESS .. c,
    TF_AWAIT .. c)
  local qname = f[1] or META.queue
  -- a child with pool or limit slots goes through the queue (claim.lua takes them); a
  -- mapped one expands, a waiting one (_await.lua) waits: neither runs
  if not served[qname] or f[2] or f[3] or f[14] or NEXT.paused(qname) then return false end
  local priority, member = tonumber(f[4]) or META.priority, member_of(c, f[5], false)
  local head = redis.call('ZRANGE', QUEUES[qname].ready, 0, 0, 'WITHSCORES')
  -- found empty after this call queued this many into it (NEXT.take_queued)
  if not head[1] then NEXT.seen_empty[qname] = OBS.queued_into[qname] or 0 end
  if head[1] then
    local score, head_score = -priority, tonumber(head[2])
    if score > head_score or (score == head_score and member > head[1]) then
      return false
    end
  end

  if not NEXT.may_take(true, nil) then return false end
  local children = OBS.children_after(f[6])
  NEXT.bound_by(children)
  take_left = take_left - 1
  local attempt = tonumber(f[7] or 0) + 1
  local fields = {TF_QUEUED_AT .. c, NEXT.now} -- queued and started at once
  begin_attempt(fields, NEXT.clears, c, attempt, handler, nonce, NEXT.now, f[11], f[12], f[13])
  redis.call('HSET', TASKS, unpack(fields))
  call_chunked('HDEL', TASKS, NEXT.clears)
  NEXT.clears = {}
  redis.call('ZADD', LEASES, NEXT.lease_until, lease_member(c))
  OBS.emit(EVENT_KIND.STARTED, c, {EVENT_FIELD.ATTEMPT, attempt, EVENT_FIELD.HANDLER, handler})
  OBS.observe_wait(qname, now, nil, now) -- started the moment it was released
  taken[#taken + 1] = {tonumber(c), attempt, f[8], task_inputs(c, f[9], f[10]),
    OBS.run_order(c, priority, member), children}
  return true
end

-- Take the next ready tasks of this job from the head of the queues this worker serves, as
-- its next claim would have: in the worker's queue order, a later queue only once the
-- earlier ones are empty; only while the head is a task of this job without pool or limit
-- slots; never from a queue with a rate limit, nor while a due retry or a limit's freed
-- slots wait for a claim to put tasks back in order first (claim.lua does those). So no
-- ready task of higher priority, or queued earlier, is passed over, and nothing is held
-- that does not start at once.
function NEXT.take_queued()
  if take_left <= 0 or META.state ~= J_RUNNING or META.paused then return end
  local last = FIRST_OWN_ARG + 4 + nserved
  for k = FIRST_OWN_ARG + 5, last do
    local q = QUEUES[ARGV[k]]
    -- a queue none of this job's tasks enter: its head is not in KEYS, so nothing after it
    if not q then break end
    -- the last queue's head is read first: empty, nothing is taken, so nothing is checked
    -- (a chain's hop); known empty when take() found it so and nothing was queued since
    local head = nil
    if k == last then
      local known = NEXT.seen_empty[ARGV[k]] == (OBS.queued_into[ARGV[k]] or 0)
      head = known and {} or redis.call('ZRANGE', q.ready, 0, take_left - 1)
      if #head == 0 then break end
    end
    if NEXT.held_back(ARGV[k], q) then break end
    while take_left > 0 and not NEXT.stopped do
      head = head or redis.call('ZRANGE', q.ready, 0, take_left - 1)
      if #head == 0 then break end -- this queue is empty: on to the next one
      local popped = {}
      for _, member in ipairs(head) do
        local job, index, rest = string.match(member, '^%d+|([^|]+)|(%d+)(.*)$')
        -- another job's task, or one with slots (or a newer release's: a marked entry)
        NEXT.stopped = job ~= JOB_ID or rest ~= ''
        index = index and string.match(index, '^0*(%d+)$') -- unpadded, as its fields name it
        NEXT.stopped = NEXT.stopped or not NEXT.start(index, ARGV[k], member)
        if NEXT.stopped then break end
        popped[#popped + 1] = member
      end
      call_chunked('ZREM', q.ready, popped)
      head = nil
    end
    if take_left <= 0 or NEXT.stopped then break end
  end
  if #NEXT.indexes == 0 then return end
  call_chunked('HSET', TASKS, NEXT.writes)
  call_chunked('HDEL', TASKS, NEXT.clears)
  call_chunked('ZADD', LEASES, NEXT.leases)
  if META.updated_at ~= now then redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, NEXT.now) end
  OBS.emit_many(EVENT_KIND.STARTED, NEXT.indexes, NEXT.attempts, {EVENT_FIELD.HANDLER, handler})
  OBS.flush_counts()
end

-- A queue's rate limit and pause, read once a call: {rate, paused} (false when absent).
NEXT.flags = {}
function NEXT.queue_flags(qname)
  local flags = NEXT.flags[qname]
  if not flags then
    flags = redis.call('HMGET', SLOT.keys.limits, LIMIT_FIELD.RATE .. qname,
      LIMIT_FIELD.PAUSED_QUEUE .. qname)
    NEXT.flags[qname] = flags
  end
  return flags
end
function NEXT.paused(qname) return NEXT.queue_flags(qname)[2] ~= false end

-- A queue the claim must serve first: a rate limit, or a retry due to go back into it; or
-- a paused one; or any, while a limit's freed slots wait for a claim to put its tasks back.
function NEXT.held_back(qname, q)
  NEXT.freed = NEXT.freed or redis.call('SCARD', SLOT.keys.freed)
  if NEXT.freed > 0 then return true end
  local flags = NEXT.queue_flags(qname)
  if flags[1] or flags[2] then return true end
  local due = redis.call('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
  return due[2] ~= nil and tonumber(due[2]) <= now
end

-- Whether one more task may be taken (released: by this call; order: its run order, nil
-- when released). Into the free slots, any. Beyond them (a prefetch), only tasks queued
-- before this call (a burst it releases goes to the free slots of every worker, through
-- their wake-ups) that sort before the first child of every task the worker holds, those
-- taken here included (NEXT.before): a thread freed while such a task runs starts what it
-- holds in run order, and must not start one before children that come first.
function NEXT.may_take(released, order)
  if take_left <= 0 then return false end
  if take_left <= NEXT.extra and (released or (NEXT.before and order >= NEXT.before)) then
    take_left = 0
    return false
  end
  return true
end

-- A task taken with these children (OBS.children_after) lowers the prefetch's bound to its
-- first child; one with too many to order bounds it to nothing.
function NEXT.bound_by(children)
  if children == 1 then
    NEXT.before = ''
  elseif children ~= 0 and (not NEXT.before or children < NEXT.before) then
    NEXT.before = children
  end
end

-- A new attempt of queued task i (its queue member: member), as start.lua makes one; a
-- stale entry (its task no longer queued: cancelled, or running through a duplicate entry)
-- is only dropped. False when the task may not be taken (NEXT.may_take): it stays queued.
function NEXT.start(i, qname, member)
  local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_ATTEMPTS .. i, TF_PAYLOAD .. i,
    TF_QUEUED_AT .. i, TF_FINISHED_AT .. i, TF_CHILDREN .. i, TF_PRIORITY .. i, TF_INPUTS .. i,
    TF_MAP_OF .. i, TF_ERROR .. i, TF_PROGRESS .. i)
  if f[1] ~= T_QUEUED and f[1] ~= T_RETRY_WAIT then return true end
  local order = OBS.run_order(i, tonumber(f[7]) or META.priority, member)
  if not NEXT.may_take(NEXT.released[i], order) then return false end
  local children = OBS.children_after(f[6])
  NEXT.bound_by(children)
  take_left = take_left - 1
  local attempt = tonumber(f[2] or 0) + 1
  begin_attempt(NEXT.writes, NEXT.clears, i, attempt, handler, nonce, NEXT.now, f[10], f[5], f[11])
  NEXT.leases[#NEXT.leases + 1] = NEXT.lease_until
  NEXT.leases[#NEXT.leases + 1] = lease_member(i)
  NEXT.indexes[#NEXT.indexes + 1] = i
  NEXT.attempts[#NEXT.attempts + 1] = attempt
  OBS.observe_wait(qname, f[4], f[5], now)
  taken[#taken + 1] = {tonumber(i), attempt, f[3], task_inputs(i, f[8], f[9]), order, children}
  return true
end

-- What one job's part of the call gathers, afresh for each job.
function NEXT.begin_job()
  taken = {}
  NEXT.writes, NEXT.clears, NEXT.leases, NEXT.indexes, NEXT.attempts = {}, {}, {}, {}, {}
  NEXT.released, NEXT.slotted, NEXT.stopped = {}, {}, false
end

-- The bound job's part: its tasks ARGV[first..last] (4 each), checked and completed, its
-- children told, its next tasks taken. One read per task; the writes of the whole batch go
-- out in a few variadic calls. Returns the job's reply.
local function complete_job(first, last)
  if not load_job() then return {META.refusal} end
  if not queues_passed() then return {KEYS_MISSING} end
  NEXT.begin_job()
  local codes, done = {}, {}
  local writes, clears, leases, history, frontier = {}, {}, {}, {}, {}
  OBS.succeeded = {indexes = {}, attempts = {}} -- one event entry for the batch
  for k = first, last, 4 do
    local i, token, result = ARGV[k], ARGV[k + 1], ARGV[k + 2]
    local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_ATTEMPTS .. i, TF_HANDLER .. i,
      TF_STARTED_AT .. i, TF_CHILDREN .. i, TF_PAYLOAD .. i, TF_ID .. i, TF_QUEUE .. i,
      TF_LIMITS .. i, TF_ERROR .. i, TF_PROGRESS .. i, TF_WAITING_FOR .. i, TF_GATE_WAIT .. i,
      TF_NONCE .. i)
    -- a compacted job (finished) has no current attempt
    local code = META.packed and ITEM_STALE_TOKEN
      or live_attempt_refusal(token, handler, f[2], f[3], f[14])
    if code then -- refused: not this handler's live attempt
    elseif f[1] == T_SUCCEEDED or done[i] then
      code = ITEM_ALREADY
    elseif f[1] ~= T_RUNNING and f[1] ~= T_TIMED_OUT then
      code = ITEM_WRONG_STATE
    else
      code = ITEM_OK
      done[i] = true
      local n = #writes
      writes[n + 1], writes[n + 2], writes[n + 3] = TF_STATE .. i, T_SUCCEEDED, TF_FINISHED_AT .. i
      writes[n + 4], writes[n + 5], writes[n + 6] = NEXT.now, TF_UPDATED_AT .. i, NEXT.now
      if result ~= '' then -- '': it returned None, which is stored as no result at all
        writes[#writes + 1] = TF_RESULT .. i
        writes[#writes + 1] = result
      end
      -- the fields it has of: error, progress, waiting for a worker with its code (it ran),
      -- waiting for a gate
      if f[10] then clears[#clears + 1] = TF_ERROR .. i end
      if f[11] then clears[#clears + 1] = TF_PROGRESS .. i end
      if f[12] then clears[#clears + 1] = TF_WAITING_FOR .. i end
      if f[13] then clears[#clears + 1] = TF_GATE_WAIT .. i end
      -- only a task with limits holds pool or limit slots (claim.lua)
      if f[9] then NEXT.slotted[#NEXT.slotted + 1] = i end
      leases[#leases + 1] = lease_member(i)
      history[#history + 1] =
        table.concat({i, f[2], T_SUCCEEDED, f[3], f[4] or '', NEXT.now, ''}, '\t')
      if f[5] then frontier[#frontier + 1] = {'r', i, i, f[5]} end -- its children, told below
      local name = OBS.payload_task_name(f[6])
      ESTIMATES.learn_run(i, f[4], name, f[7], ARGV[k + 3])
      OBS.succeeded.indexes[#OBS.succeeded.indexes + 1] = i
      OBS.succeeded.attempts[#OBS.succeeded.attempts + 1] = f[2]
      if OBS.metrics_on then -- labels as OBS.task_labels makes them, from the read above
        local labels = (f[8] or META.queue) .. '\t' .. (name or '?')
        OBS.count_finished(i, T_SUCCEEDED, labels)
        OBS.observe_run(i, f[4], now, labels)
      end
    end
    codes[#codes + 1] = code
  end
  if #leases > 0 then
    call_chunked('HSET', TASKS, writes)
    call_chunked('HDEL', TASKS, clears)
    call_chunked('ZREM', LEASES, leases)
    for _, i in ipairs(NEXT.slotted) do SLOT.free_slots(i) end
    -- a limit's freed slots: what a take checks first (NEXT.held_back) is read again
    if #NEXT.slotted > 0 then NEXT.freed = nil end
    OBS.emit_many(EVENT_KIND.SUCCEEDED, OBS.succeeded.indexes, OBS.succeeded.attempts,
      {EVENT_FIELD.HANDLER, handler})
    append_history(history)
    task_finished(now, #leases)
  end
  drain_frontier(now, take, COMPLETE_FRONTIER_BUDGET, frontier)
  NEXT.take_queued()
  return {OK, codes, MSGPACK.tasks(taken)}
end

-- Each job's part in turn: the first is bound already (the context's), each further one to
-- its five keys. A part that raises an error (a key of the wrong type, say) ends the call:
-- it gets that error, the parts before it keep their replies (what they wrote stays: Redis
-- rolls nothing back), and the parts after it get false: not run (the caller sends them
-- again).
local replies, at, k, jobs = {}, first_job + 1, FIRST_OWN_KEY + 1, tonumber(ARGV[first_job])
for j = 1, jobs do
  if j > 1 then
    bind_job(k, ARGV[at])
    k = k + 5
  end
  local count = tonumber(ARGV[at + 1])
  local ran, reply = pcall(complete_job, at + 2, at + 1 + count * 4)
  if not ran then
    replies[j] = {err = type(reply) == 'table' and reply.err or tostring(reply)}
    for rest = j + 1, jobs do replies[rest] = false end
    break
  end
  replies[j] = reply
  at = at + 2 + count * 4
end
ESTIMATES.flush()
return replies
