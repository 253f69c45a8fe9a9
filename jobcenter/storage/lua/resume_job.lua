--[[ resume_job: a paused job's tasks that claims parked go back into their queues, with
  their own scores and members (their places), in chunks; the last call ends the pause.
  Until then claims park what they meet of it, so no task of it starts half way through.
  KEYS: the job context (_job.lua), with every queue its tasks may enter
  ARGV[FIRST_OWN_ARG] most parked tasks to put back in this call
  Returns {0, 0} resumed | {0, 1} a chunk put back, more wait: call again | {1} not paused
          | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it ]]

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
local limits, parked = SLOT.keys.limits, SLOT.keys.parked
if redis.call('HEXISTS', limits, LIMIT_FIELD.PAUSED_JOB .. JOB_ID) == 0 then return {ALREADY} end
local budget = tonumber(ARGV[FIRST_OWN_ARG])
local id = LIMIT_KIND.PAUSED .. JOB_ID
for qname, queue in pairs(QUEUES) do
  local prefix = SLOT.parked_prefix(qname, id)
  local entries = redis.call('ZRANGEBYLEX', parked, '[' .. prefix, '(' .. prefix .. ':',
    'LIMIT', 0, budget)
  for _, entry in ipairs(entries) do
    local order, member = string.match(string.sub(entry, #prefix + 1), '^(%d+)|(.*)$')
    local index = string.match(member, '^%d+|[^|]+|(%d+)')
    redis.call('ZREM', parked, entry)
    redis.call('ZADD', queue.ready, tonumber(order) - SLOT.ORDER_OFFSET, member)
    redis.call('HDEL', limits, LIMIT_FIELD.PARKED_AT .. JOB_ID .. '|' .. tonumber(index))
    SLOT.count_parked(limits, id, -1)
  end
  wake(queue.wake, #entries)
  budget = budget - #entries
  if budget <= 0 then return {OK, 1} end
end
SLOT.forget_paused_job(limits, JOB, JOB_ID)
redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now_ms())
OBS.emit(EVENT_KIND.UNPAUSED, false)
return {OK, 0}
