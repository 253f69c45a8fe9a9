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
-- the learned estimates, in one table (the main chunk may hold at most 200 locals):
-- weight: of the newest run in the moving average, a few runs adapt it; max: fields per
-- shard, past this only known ones are updated
local EST = {key = KEYS[XK], weight = 0.3, max = 100000, job_name = nil,
             task_key = string.char(160 + #PK.TASK) .. PK.TASK} -- the key as a msgpack fixstr

-- The payload is msgpack of a map whose first key is PK.TASK (layout.py writes it first): the
-- task name is the string right after it, read here without unpacking the arguments.
local function payload_task_name(p)
  if not p or string.sub(p, 2, 1 + #EST.task_key) ~= EST.task_key then return nil end
  local at = 2 + #EST.task_key -- the name's msgpack header
  local b = string.byte(p, at)
  if b >= 160 and b <= 191 then return string.sub(p, at + 1, at + b - 160) end -- fixstr
  if b == 217 then return string.sub(p, at + 2, at + 1 + string.byte(p, at + 1)) end -- str 8
  return nil
end

-- Fold one succeeded run (ms, Redis time) into a moving average (jobcenter/model/ordering.py).
local function learn(field, ms)
  local old = tonumber(redis.call('HGET', EST.key, field))
  if not old and redis.call('HLEN', EST.key) >= EST.max then return end
  local value = ms
  if old then value = old + EST.weight * (ms - old) end
  redis.call('HSET', EST.key, field, string.format('%.1f', value))
end

local function learn_run(i, started, payload)
  if not started then return end
  local ms = math.max(0, now - tonumber(started))
  EST.job_name = EST.job_name or redis.call('HGET', J, JF.NAME) or ''
  -- the instances of a mapped task (`<id>[<n>]`) share their task's estimate
  local id = string.gsub(redis.call('HGET', T, TF_ID .. i) or i, '%[%d+%]$', '')
  learn('j\t' .. EST.job_name .. '\t' .. id, ms)
  local task_name = payload_task_name(payload)
  if task_name then learn('t\t' .. task_name, ms) end
end

local taken = {}
-- Take a released child only if it would be the next claimed from its queue anyway: the
-- shortcut must never jump ahead of a higher-priority or older ready task.
local function take(c)
  local qname = task_queue(c)
  if take_left <= 0 or not served[qname] then return false end
  -- a child with pool or limit slots goes through the queue: claim.lua takes them
  if redis.call('HEXISTS', T, TF_LIMITS .. c) == 1 then return false end
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
  taken[#taken + 1] = {tonumber(c), attempt, redis.call('HGET', T, TF_PAYLOAD .. c), task_inputs(c)}
  return true
end

-- One read per task; the writes of the whole batch go out in a few variadic calls.
local codes, done = {}, {}
local writes, clears, leases, history, frontier = {}, {}, {}, {}, {}
for k = first_triple, #ARGV, 3 do
  local i, attempt, result = ARGV[k], ARGV[k + 1], ARGV[k + 2]
  local f = redis.call('HMGET', T, TF_STATE .. i, TF_ATTEMPTS .. i, TF_HANDLER .. i,
    TF_STARTED_AT .. i, TF_CHILDREN .. i, TF_PAYLOAD .. i)
  local code = ITEM_OK
  if (f[2] or '0') .. ':' .. (f[3] or '') ~= attempt .. ':' .. handler then
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
    clears[#clears + 1] = TF_GATE_WAIT .. i -- nor for a gate
    leases[#leases + 1] = lease_member(i)
    history[#history + 1] = table.concat({i, f[2], T_SUCCEEDED, f[3], f[4] or '', now, ''}, '\t')
    if f[5] then frontier[#frontier + 1] = 'r|' .. i .. '|' .. i .. '|1' end
    learn_run(i, f[4], f[6])
  end
  codes[#codes + 1] = code
end
if #leases > 0 then
  call_chunked('HSET', T, writes)
  call_chunked('HDEL', T, clears)
  call_chunked('ZREM', LEASES, leases)
  for i in pairs(done) do SL.free_slots(i) end
  append_history(history)
  call_chunked('RPUSH', F, frontier)
  task_finished(now, #leases)
end
drain_frontier(now, take)
return {OK, codes, taken}
