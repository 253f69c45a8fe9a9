--[[ give_back: a worker that lacks a task's code hands its attempt back unused. The task
  goes back to its queue after a delay (so that worker does not take it straight back): a
  quarter of the time it has waited for a worker with the code so far, within the bounds
  given; the shortest delay when a live worker serves the task's name on its queue (that
  worker takes it soon: a longer delay would only make it wait). The attempt does not
  count: the attempt number goes back to what it was, and the handler is cleared, so no
  token of this or an earlier attempt matches any more (its nonce stays: a late report of
  it is stale, not unknown). The task
  records the name it waits for and since when ('wf:' field "<since ms>|<name>", kept over
  repeated give-backs) for status, and for recovery, which fails it once no live worker has
  had the name for too long.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] shortest delay ms  ARGV[FIRST_OWN_ARG+2]
  longest delay ms
  ARGV[FIRST_OWN_ARG+3] what live workers serve: "queue|name" entries, each followed by a newline
  then triples: task index, fencing token (_job.lua token_of), task name
  Returns {0, {code per triple}} | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  Codes: 0 given back | -2 stale token (not this handler's attempt) | -3 not running
  | -9 an attempt Redis never started: it lost writes (refusal_of) ]]

local handler = ARGV[FIRST_OWN_ARG]
local delay_min, delay_max = tonumber(ARGV[FIRST_OWN_ARG + 1]), tonumber(ARGV[FIRST_OWN_ARG + 2])
local served = {}
for member in string.gmatch(ARGV[FIRST_OWN_ARG + 3], '([^\n]+)\n') do served[member] = true end
if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end

local now = now_ms()
local codes, woken = {}, {}
for k = FIRST_OWN_ARG + 4, #ARGV, 3 do
  local i, token, name = ARGV[k], ARGV[k + 1], ARGV[k + 2]
  local state = task_state(i)
  local code = ITEM_OK
  local refusal, fields = token_refusal(i, token, handler)
  local attempt = fields[1]
  if refusal then
    code = refusal
  elseif state ~= T_RUNNING and state ~= T_TIMED_OUT then
    code = ITEM_WRONG_STATE
  else
    local waiting = redis.call('HGET', TASKS, TF_WAITING_FOR .. i)
    local since = tonumber(waiting and string.match(waiting, '^(%d+)|') or now)
    local queue_name = task_queue(i)
    local delay = delay_min
    if not served[queue_name .. '|' .. name] then
      delay = math.min(delay_max, math.max(delay_min, math.floor((now - since) / 4)))
    end
    OBS.emit(EVENT_KIND.GIVEN_BACK, i, {EVENT_FIELD.ATTEMPT, attempt, EVENT_FIELD.HANDLER, handler,
      EVENT_FIELD.DETAIL, name})
    redis.call('HSET', TASKS, TF_STATE .. i, T_QUEUED, TF_ATTEMPTS .. i, tonumber(attempt) - 1,
      TF_WAITING_FOR .. i, since .. '|' .. name, TF_UPDATED_AT .. i, now)
    redis.call('HDEL', TASKS, TF_HANDLER .. i, TF_STARTED_AT .. i)
    redis.call('ZREM', LEASES, lease_member(i))
    SLOT.free_slots(i)
    local queue = QUEUES[queue_name]
    redis.call('ZADD', queue.delayed, now + delay, task_priority(i) .. '|' .. queue_member(i))
    woken[queue.wake] = true
  end
  codes[#codes + 1] = code
end
-- an idle worker re-claims and learns when to wake for these tasks
for key in pairs(woken) do wake(key, 1) end
if next(woken) then redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now) end
return {OK, codes}
