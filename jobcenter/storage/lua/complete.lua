--[[ complete: running -> succeeded for a batch of one job's tasks; release each child whose
  last dependency this was, exactly once. A released child on a queue this worker serves may
  be taken at once (it starts running here, skipping the queue round trip). Each success
  updates the learned run time of its job name + task id and of its task name.
  KEYS: the job context (_job.lua), then KEYS[XK] the shard's learned-estimates hash
  ARGV[A] handler id  ARGV[A+1] lease ms  ARGV[A+2] max children to take
  ARGV[A+3] number of queues the worker serves  ARGV[A+4..] their names
  then triples: task index, attempt, its result (msgpack bytes, stored with the success;
  '' for None: nothing stored)
  Returns {0, {code per triple}, {{index, attempt, payload, inputs} per taken child}} | {-4}
          | {-5}
  Codes: 0 completed | 1 this attempt completed already | -2 stale token | -3 not running ]]

local handler = ARGV[A]
local lease_ms, take_left = tonumber(ARGV[A + 1]), tonumber(ARGV[A + 2])
local nserved = tonumber(ARGV[A + 3])
local served = {}
for k = A + 4, A + 3 + nserved do served[ARGV[k]] = true end
local first_triple = A + 4 + nserved

if not load_job() then return {JOB_GONE} end
if not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local ESTIMATES = KEYS[XK]
-- weight: of the newest run in the moving average (a few runs adapt it); max: fields per
-- shard, past which only known ones are updated (one table: at most 200 locals a script)
local ESTIMATE = {weight = 0.3, max = 100000}
local job_name = nil

-- Fold one succeeded run (ms, Redis time) into a moving average (jobcenter/model/ordering.py).
local function learn(field, ms)
  local old = tonumber(redis.call('HGET', ESTIMATES, field))
  if not old and redis.call('HLEN', ESTIMATES) >= ESTIMATE.max then return end
  local value = ms
  if old then value = old + ESTIMATE.weight * (ms - old) end
  redis.call('HSET', ESTIMATES, field, string.format('%.1f', value))
end

local function learn_run(i, started, task_name)
  if not started then return end
  local ms = math.max(0, now - tonumber(started))
  job_name = job_name or redis.call('HGET', J, JF.NAME) or ''
  -- the instances of a mapped task (`<id>[<n>]`) share their task's estimate
  local id = string.gsub(redis.call('HGET', T, TF_ID .. i) or i, '%[%d+%]$', '')
  learn('j\t' .. job_name .. '\t' .. id, ms)
  if task_name then learn('t\t' .. task_name, ms) end
end

local taken = {}
-- Take a released child only if it would be the next claimed from its queue anyway: the
-- shortcut must never jump ahead of a higher-priority or older ready task.
local function take(c)
  local qname = task_queue(c)
  if take_left <= 0 or not served[qname] then return false end
  if redis.call('HEXISTS', T, TF_MAP_ARG .. c) == 1 then return false end -- expands, never runs
  local head = redis.call('ZRANGE', QUEUES[qname].ready, 0, 0, 'WITHSCORES')
  if head[1] then
    local score, head_score = -task_priority(c), tonumber(head[2])
    if score > head_score or (score == head_score and queue_member(c) > head[1]) then
      return false
    end
  end

  take_left = take_left - 1
  local attempt = redis.call('HINCRBY', T, TF_ATTEMPTS .. c, 1)
  redis.call('HSET', T, TF_STATE .. c, T_RUNNING, TF_HANDLER .. c, handler, TF_QUEUED_AT .. c, now,
    TF_STARTED_AT .. c, now, TF_UPDATED_AT .. c, now)
  redis.call('HDEL', T, TF_ERROR .. c, TF_FINISHED_AT .. c, TF_PROGRESS .. c) -- a fresh attempt
  redis.call('ZADD', LEASES, now + lease_ms, lease_member(c))
  OBS.emit(EV.STARTED, c, {EF.ATTEMPT, attempt, EF.HANDLER, handler})
  OBS.observe_wait(qname, now, nil, now) -- started the moment it was released
  taken[#taken + 1] = {tonumber(c), attempt, redis.call('HGET', T, TF_PAYLOAD .. c), task_inputs(c)}
  return true
end

-- One read per task; the writes of the whole batch go out in a few variadic calls.
local codes, done = {}, {}
local writes, clears, leases, history, frontier = {}, {}, {}, {}, {}
OBS.succeeded = {indexes = {}, attempts = {}} -- one event entry for the batch
for k = first_triple, #ARGV, 3 do
  local i, attempt, result = ARGV[k], ARGV[k + 1], ARGV[k + 2]
  local f = redis.call('HMGET', T, TF_STATE .. i, TF_ATTEMPTS .. i, TF_HANDLER .. i,
    TF_STARTED_AT .. i, TF_CHILDREN .. i, TF_PAYLOAD .. i)
  local code = ITEM_OK
  if META.packed then
    code = ITEM_STALE_TOKEN -- its job finished and was compacted: no attempt of it is current
  elseif (f[2] or '0') .. ':' .. (f[3] or '') ~= attempt .. ':' .. handler then
    code = ITEM_STALE_TOKEN
  elseif f[1] == T_SUCCEEDED or done[i] then
    code = ITEM_ALREADY
  elseif f[1] ~= T_RUNNING and f[1] ~= T_TIMED_OUT then
    code = ITEM_NOT_RUNNING
  else
    done[i] = true
    for _, v in ipairs({TF_STATE .. i, T_SUCCEEDED, TF_FINISHED_AT .. i, now, TF_UPDATED_AT .. i, now}) do
      writes[#writes + 1] = v
    end
    if result ~= '' then -- '': it returned None, which is stored as no result at all
      writes[#writes + 1] = TF_RESULT .. i
      writes[#writes + 1] = result
    end
    clears[#clears + 1] = TF_ERROR .. i
    clears[#clears + 1] = TF_PROGRESS .. i
    clears[#clears + 1] = TF_WAITING_FOR .. i -- it ran: no longer waiting for a worker with its code
    leases[#leases + 1] = lease_member(i)
    history[#history + 1] = table.concat({i, f[2], T_SUCCEEDED, f[3], f[4] or '', now, ''}, '\t')
    if f[5] then frontier[#frontier + 1] = 'r|' .. i .. '|' .. i .. '|1' end
    local name = OBS.payload_task_name(f[6])
    learn_run(i, f[4], name)
    OBS.succeeded.indexes[#OBS.succeeded.indexes + 1] = i
    OBS.succeeded.attempts[#OBS.succeeded.attempts + 1] = f[2]
    if OBS.metrics_on then
      OBS.count_finished(i, T_SUCCEEDED, OBS.task_labels(i, name))
      OBS.observe_run(i, f[4], now, OBS.task_labels(i, name))
    end
  end
  codes[#codes + 1] = code
end
if #leases > 0 then
  call_chunked('HSET', T, writes)
  call_chunked('HDEL', T, clears)
  call_chunked('ZREM', LEASES, leases)
  OBS.emit_many(EV.SUCCEEDED, OBS.succeeded.indexes, OBS.succeeded.attempts, {EF.HANDLER, handler})
  append_history(history)
  call_chunked('RPUSH', F, frontier)
  task_finished(now, #leases)
end
drain_frontier(now, take)
return {OK, codes, taken}
