--[[ revive: run failed tasks again (a dead letter requeued, or `retry JOB`, in chunks): each
  root goes from failed back to queued with a fresh budget of attempts; each upstream_failed
  task given goes back to waiting (queued if its rule is met meanwhile) unless its trigger
  rule still fails on its parents, counted with the tasks this call revives as not ended (a
  parent failed for good: not revived, or revived by an earlier chunk and failed again). Its
  parent counters are counted again from its parents' states; a waiting child of a revived
  task stops counting that parent as failed (parent_ended counts it when it ends again).
  A finished job re-opens (running, no TTL) and is finalized again when its tasks end.
  All checks come first: a root not failed, a task to reset not upstream_failed, a
  cancelled job, or a packed one (restore.lua first), and nothing is written.
  KEYS: the job context (_job.lua)
  ARGV[A] number of roots  ARGV[A+1..] root indexes  then for each task to reset (parents
  before children): its index, its number of parents, their indexes
  Returns {0, tasks revived} | {1} a failure cascade is under way: finish it ('continue')
          and call again | {-3, reason} | {-4} job gone | {-5} queues not passed 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local P = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
if redis.call('HGET', J, JF.STOP) == 'cancel' then return {WRONG_STATE, 'the job was cancelled'} end
if redis.call('EXISTS', F) == 1 then return {BUSY} end
if redis.call('HEXISTS', J, JF.PACKED) == 1 then
  return {WRONG_STATE, 'the job is packed: restore it first (restore.lua)'}
end

local function not_in(i, want)
  return {WRONG_STATE, 'task ' .. (redis.call('HGET', T, TF_ID .. i) or i) .. ' is not ' .. want}
end
local nroots = tonumber(ARGV[A])
local roots, resets, revived, verdicts, counts = {}, {}, {}, {}, {}
for k = A + 1, A + nroots do
  if task_state(ARGV[k]) ~= T_FAILED then return not_in(ARGV[k], T_FAILED) end
  roots[#roots + 1] = ARGV[k]
  revived[ARGV[k]] = true
end
local k = A + 1 + nroots
while k <= #ARGV do
  local i, nparents = ARGV[k], tonumber(ARGV[k + 1])
  if task_state(i) ~= T_UPSTREAM_FAILED then return not_in(i, T_UPSTREAM_FAILED) end
  local parents = count_parents(k + 2, k + 1 + nparents, revived)
  local verdict = parents_verdict(i, parents)
  if verdict ~= 'fail' and verdict ~= 'skip' then
    resets[#resets + 1] = i
    revived[i] = true
    verdicts[i], counts[i] = verdict, parents
  end
  k = k + 2 + nparents
end
if #roots + #resets == 0 then return {OK, 0} end

-- Task i is alive again: a waiting child that counted it as failed (it has a trigger rule,
-- or a parent skipped) counts it as not ended; a child in this call's resets is counted
-- afresh below.
local function uncount_failed_parent(i)
  local csv = redis.call('HGET', T, TF_CHILDREN .. i) or ''
  for c in string.gmatch(csv, '[^,]+') do
    if task_state(c) == T_WAITING and redis.call('HEXISTS', T, TF_PARENTS_LEFT .. c) == 1 then
      redis.call('HINCRBY', T, TF_PARENTS_LEFT .. c, 1)
      redis.call('HINCRBY', T, TF_PARENTS_FAILED .. c, -1)
    end
  end
end

local now = now_ms()
if redis.call('HEXISTS', J, JF.TRIGGER_RULES) == 1 then -- else no such child exists
  for _, list in ipairs({roots, resets}) do
    for _, i in ipairs(list) do uncount_failed_parent(i) end
  end
end
for _, i in ipairs(resets) do
  OBS.emit(EV.REVIVED, i)
  redis.call('HDEL', T, TF_FINISHED_AT .. i, TF_ERROR .. i)
  store_parent_counts(i, counts[i])
  if verdicts[i] == 'run' then
    enqueue(i, now) -- its rule was met while it was blocked: nothing else would release it
  else
    redis.call('HSET', T, TF_STATE .. i, T_WAITING, TF_UPDATED_AT .. i, now)
  end
end
for _, i in ipairs(roots) do
  OBS.emit(EV.REVIVED, i)
  local used = tonumber(redis.call('HGET', T, TF_ATTEMPTS .. i) or 0)
  redis.call('HSET', T, TF_MAX_ATTEMPTS .. i, used + max_attempts(i))
  redis.call('HDEL', T, TF_FINISHED_AT .. i)
  redis.call('ZREM', DLQ, lease_member(i))
  enqueue(i, now)
end
flush_wakes()
local n = #roots + #resets
redis.call('HINCRBY', J, JF.LEFT, n)
redis.call('HINCRBY', J, JF.FAILED, -n)
local expiring = expiring_member()
set_job_state(J_RUNNING)
redis.call('HSET', J, JF.UPDATED_AT, now)
redis.call('HDEL', J, JF.FINISHED_AT, JF.STOP)
redis.call('ZREM', LEADER, 'finalize|' .. JOB_ID)
redis.call('ZREM', LEADER, 'compact|' .. JOB_ID) -- a compaction under way starts over
redis.call('DEL', P)
redis.call('HDEL', J, JF.COMPACT_CURSOR)
for _, key in ipairs({J, T, H, F}) do redis.call('PERSIST', key) end
if IDEM ~= J then redis.call('PERSIST', IDEM) end
redis.call('ZADD', ACTIVE, redis.call('HGET', J, JF.CREATED_AT), JOB_ID)
redis.call('ZREM', EXPIRING, expiring)
return {OK, n}
