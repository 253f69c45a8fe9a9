--[[ revive: run failed tasks again (a dead letter requeued, or `retry JOB`, in chunks): each
  root goes from failed back to queued with a fresh budget of attempts. Every task
  downstream of them that ended (succeeded, failed, upstream_failed or skipped: a cleanup
  that ran after the failure, an error handler) goes back to waiting too, to run again after
  its parents' new attempts (queued if its rule is met meanwhile), unless its trigger rule
  still fails or skips on its parents, counted with the tasks this call revives as not ended
  (a parent failed for good: not revived, or revived by an earlier chunk and failed again).
  Its parent counters are counted again from its parents' states; a task that ran gets a
  fresh budget of attempts and loses its result; a waiting child of a revived task stops
  counting how that parent ended (parent_ended counts it when it ends again).
  A finished job re-opens (running, no TTL) and is finalized again when its tasks end.
  All checks come first: a root not failed, a task to reset not ended or without its
  arguments (freed when its job ended succeeded: a retry of several calls stopped half way),
  a cancelled job, or a packed one (restore.lua first), and nothing is written.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] number of roots  ARGV[FIRST_OWN_ARG+1..] root indexes  then for each task to
  reset (parents before children): its index, its number of parents, their indexes
  Returns {0, tasks revived} | {3} a failure cascade is under way: finish it ('continue')
          and call again | {-3, reason} | {-4} job gone | {-5} queues not passed 
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
local refused = RESET.refusal()
if refused then return refused end

local nroots = tonumber(ARGV[FIRST_OWN_ARG])
local roots = {}
for k = FIRST_OWN_ARG + 1, FIRST_OWN_ARG + nroots do
  if task_state(ARGV[k]) ~= T_FAILED then return RESET.not_in(ARGV[k], T_FAILED) end
  roots[#roots + 1] = ARGV[k]
  RESET.revived[ARGV[k]] = true
  RESET.ended[ARGV[k]] = T_FAILED
end
local refusal = RESET.read(FIRST_OWN_ARG + 1 + nroots, {})
if refusal then return refusal end
if #roots + #RESET.list == 0 then return {OK, 0} end

local now = now_ms()
RESET.uncount(roots)
RESET.uncount(RESET.list)
for _, i in ipairs(roots) do
  OBS.emit(EVENT_KIND.REVIVED, i)
  RESET.fresh_budget(i)
  redis.call('HDEL', TASKS, TF_FINISHED_AT .. i)
  redis.call('ZREM', DLQ, lease_member(i))
  enqueue(i, now)
end
local failed, skipped = RESET.apply(now, EVENT_KIND.REVIVED)
flush_wakes()
local n = #roots + #RESET.list
RESET.reopen_job(PACKED, n, #roots + failed, skipped, now)
return {OK, n}
