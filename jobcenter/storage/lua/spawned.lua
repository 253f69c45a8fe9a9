--[[ spawned: a running attempt returned spawn(spec) (model/spawn.py) and the store started the
  child job: the task now waits for the child (awaiting, `aw:` "k|0|<child id>", `aj:` the
  child's task whose result it takes, '' for all of them), its lease and slots given back
  (no slot, no thread while the child runs), and the job's 'await' message asks the leader to
  register it with the child (runtime/waits.py), whose end settles it (await_settle.lua).
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] task index
  ARGV[FIRST_OWN_ARG+2] fencing token (_job.lua token_of)  ARGV[FIRST_OWN_ARG+3] the child's id
  ARGV[FIRST_OWN_ARG+4] the child's task whose result it takes ('' every result)
  Returns {0} | {1} it waits for that child already | {-2} stale token | {-3} not running
          | {-7} its job is stopping: the caller cancels the child | {-9} an attempt Redis
          never started | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it ]]

local handler, i, token = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1], ARGV[FIRST_OWN_ARG + 2]
local child, named = ARGV[FIRST_OWN_ARG + 3], ARGV[FIRST_OWN_ARG + 4]
if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
local spec = 'k|0|' .. child
local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_AWAIT .. i)
if f[1] == T_AWAITING and f[2] == spec then return {ALREADY} end
local refusal = token_refusal(i, token, handler)
if refusal then return {refusal} end
if f[1] ~= T_RUNNING and f[1] ~= T_TIMED_OUT then return {WRONG_STATE} end
if redis.call('HEXISTS', JOB, JOB_FIELD.STOP) == 1 then return {JOB_STOPPED} end

local now = now_ms()
record_history(i, T_AWAITING, now, 'spawned child job ' .. child)
redis.call('HSET', TASKS, TF_STATE .. i, T_AWAITING, TF_AWAIT .. i, spec, TF_AWAIT_JOB .. i, named,
  TF_QUEUED_AT .. i, now, TF_UPDATED_AT .. i, now)
redis.call('HDEL', TASKS, TF_ERROR .. i, TF_PROGRESS .. i, TF_WAITING_FOR .. i, TF_GATE_WAIT .. i)
redis.call('ZREM', LEASES, lease_member(i))
SLOT.free_slots(i)
local awaits = redis.call('HGET', JOB, JOB_FIELD.AWAITS) or ''
if not string.find(',' .. awaits .. ',', ',' .. i .. ',', 1, true) then
  redis.call('HSET', JOB, JOB_FIELD.AWAITS, awaits == '' and i or awaits .. ',' .. i)
end
redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now)
OBS.emit(EVENT_KIND.AWAITING, i, {EVENT_FIELD.DETAIL, 'child job ' .. child})
await_due_by(now)
wake(LEADER_WAKE, 1)
return {OK}
