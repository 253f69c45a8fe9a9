--[[ delete: remove a finished job and every trace of it: its keys, its entries in the list
  indexes, its idempotency key, its dead letters and its notifications.
  KEYS: the job context (_job.lua), then KEYS[FIRST_OWN_KEY] jobs zset
  KEYS[FIRST_OWN_KEY+1] owner's jobs zset (the job hash again when no owner)
  KEYS[FIRST_OWN_KEY+2] the firing schedule's jobs zset (the job hash again when no schedule fired
  it)
  KEYS[FIRST_OWN_KEY+3] its notifications hash  KEYS[FIRST_OWN_KEY+4] its deliveries list
  ARGV[FIRST_OWN_ARG..] indexes of its failed tasks (its dead letters)
  Returns {0} | {-3} the job is not finished (cancel it first) | {-4} job gone | {-5} 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not load_job() then return {META.refusal} end
if META.state ~= J_SUCCEEDED and META.state ~= J_FAILED and META.state ~= J_CANCELLED then
  return {WRONG_STATE}
end
if not queues_passed() then return {KEYS_MISSING} end
local expiring = expiring_member()
for channel in string.gmatch(redis.call('HGET', JOB, JOB_FIELD.NOTIFY_TO) or '', '[^,]+') do
  redis.call('ZREM', NOTIFY, channel .. '|' .. JOB_ID)
end
redis.call('DEL', KEYS[FIRST_OWN_KEY + 3], KEYS[FIRST_OWN_KEY + 4])
for k = FIRST_OWN_ARG, #ARGV do redis.call('ZREM', DLQ, lease_member(ARGV[k])) end
redis.call('DEL', JOB, TASKS, HISTORY, FRONTIER, PACKED)
redis.call('ZREM', KEYS[FIRST_OWN_KEY], JOB_ID)
redis.call('ZREM', ACTIVE, JOB_ID)
if KEYS[FIRST_OWN_KEY + 1] ~= JOB then redis.call('ZREM', KEYS[FIRST_OWN_KEY + 1], JOB_ID) end
if KEYS[FIRST_OWN_KEY + 2] ~= JOB then redis.call('ZREM', KEYS[FIRST_OWN_KEY + 2], JOB_ID) end
redis.call('ZREM', STATE_INDEX[META.state], JOB_ID)
if IDEM ~= JOB then redis.call('DEL', IDEM) end
redis.call('ZREM', EXPIRING, expiring)
if SLOT.archive then redis.call('ZREM', SLOT.archive, JOB_ID) end
OBS.emit(EVENT_KIND.DELETED, false)
return {OK}
