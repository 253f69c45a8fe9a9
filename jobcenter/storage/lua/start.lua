--[[ start: reserved -> running: a new attempt of each task this handler reserved.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] handler id  ARGV[FIRST_OWN_ARG+1] the claim's nonce (random, drawn by the
  worker: each attempt's fencing token is "<attempt>:<handler>:<nonce>", _job.lua token_of)
  ARGV[FIRST_OWN_ARG+2..] task indexes
  Returns {0, {{index, attempt, payload, inputs, run order, children}...} (as one msgpack
  string: MSGPACK.tasks), the job's queues, its idempotency key} (inputs: _data.lua task_inputs, the
  parents' results the task receives; run order: OBS.run_order, where it stands in its queue's
  order; children:
  OBS.children_after, 0 when it releases no others as it ends)
          | {-4} job gone (its reservations are dropped)
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it
  A task reserved by another handler is skipped untouched; one no longer queued (cancelled)
  has its reservation dropped. ]]

local handler, nonce = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1]
if not load_job() then
  if META.refusal == JOB_GONE then drop_reservations(FIRST_OWN_ARG + 2) end
  return {META.refusal}
end

local now = now_ms()
local now_text = tostring(now) -- written as text: a number is formatted by each call
local leases = {}
for k = FIRST_OWN_ARG + 2, #ARGV do leases[#leases + 1] = lease_member(ARGV[k]) end
local holders = redis.call('HMGET', CLAIMS, unpack(leases))
local started, mine, dropped, writes, clears, seen = {}, {}, {}, {}, {}, {}
local started_indexes, started_attempts = {}, {}
for k = FIRST_OWN_ARG + 2, #ARGV do
  local i, lease = ARGV[k], leases[k - FIRST_OWN_ARG - 1]
  if holders[k - FIRST_OWN_ARG - 1] == handler and not seen[i] then
    seen[i] = true
    mine[#mine + 1] = lease
    local f = redis.call('HMGET', TASKS, TF_STATE .. i, TF_ATTEMPTS .. i, TF_PAYLOAD .. i,
      TF_QUEUE .. i, TF_QUEUED_AT .. i, TF_FINISHED_AT .. i, TF_CHILDREN .. i, TF_PRIORITY .. i,
      TF_RANK .. i, TF_LIMITS .. i, TF_INPUTS .. i, TF_MAP_OF .. i, TF_ERROR .. i, TF_PROGRESS .. i)
    if f[1] == T_QUEUED or f[1] == T_RETRY_WAIT then
      local attempt = tonumber(f[2] or 0) + 1
      begin_attempt(writes, clears, i, attempt, handler, nonce, now_text, f[13], f[6], f[14])
      local order = OBS.run_order(i, tonumber(f[8]) or META.priority, member_of(i, f[9], f[10]))
      started[#started + 1] = {tonumber(i), attempt, f[3], task_inputs(i, f[11], f[12]), order,
        OBS.children_after(f[7])}
      started_indexes[#started_indexes + 1] = i
      started_attempts[#started_attempts + 1] = attempt
      OBS.observe_wait(f[4] or META.queue, f[5], f[6], now)
    elseif f[1] ~= T_RUNNING and f[1] ~= T_TIMED_OUT then
      dropped[#dropped + 1] = lease -- cancelled or finished meanwhile
    end -- running: a duplicate entry was claimed; the lease stays the running attempt's
  end
end
call_chunked('HDEL', CLAIMS, mine)
call_chunked('ZREM', LEASES, dropped)
for _, lease in ipairs(dropped) do SLOT.free_slots(string.match(lease, '|(%d+)$')) end
-- the job's first starts (none of its tasks ended yet): the tasks hash as a hash table now
if #started > 0 and META.left == META.n then tasks_as_hashtable(META.n) end
call_chunked('HSET', TASKS, writes)
call_chunked('HDEL', TASKS, clears)
if #started > 0 then redis.call('HSET', JOB, JOB_FIELD.UPDATED_AT, now_text) end
OBS.emit_many(EVENT_KIND.STARTED, started_indexes, started_attempts, {EVENT_FIELD.HANDLER, handler})
OBS.flush_counts()
return {OK, MSGPACK.tasks(started), META.queues, META.idem or ''}
