--[[ clear: put ended tasks of a job back to run again, by hand (`jobcenter clear`), in
  chunks: the tasks a person named and those the caller added around them (below them with
  --downstream, above with --upstream), parents before children. Each goes back to waiting,
  or queued when its parents let it run already, with a fresh budget of attempts, without
  its result or error, its parents counted afresh (those this call or an earlier chunk
  cleared as not ended). A task not cleared keeps what it has: a child that ran keeps
  running or keeps its result; a waiting child stops counting how a cleared parent ended.
  A finished job re-opens (running, no TTL) and is finalized again when its tasks end.
  All checks come first: a task not ended (queued, running, waiting for a retry), a child
  kept that is queued or waits for a retry (it would start without the result), one
  without its arguments, a named task whose trigger rule
  fails or skips on its parents as they ended, a cancelled job or a packed one (restore.lua
  first), and nothing is written.
  KEYS: the job context (_job.lua)
  ARGV[FIRST_OWN_ARG] who  ARGV[FIRST_OWN_ARG+1] why ('' for no reason)
  ARGV[FIRST_OWN_ARG+2] number of named tasks in this chunk, then their indexes, then for
  each task to clear (parents before children): its index, its number of parents, their
  indexes
  Returns {0, tasks cleared} | {3} a cascade is under way: finish it ('continue') and call
          again | {-3, reason} | {-4} job gone | {-5} queues not passed
          | {-10} a newer release wrote the job (NEWER_PROTOCOL): left to it]]

local PACKED = KEYS[14 + #JOB_STATES] -- the packed record (_job.lua)

if not load_job() then return {META.refusal} end
if not queues_passed() then return {KEYS_MISSING} end
local refused = RESET.refusal()
if refused then return refused end

local who, why = ARGV[FIRST_OWN_ARG], ARGV[FIRST_OWN_ARG + 1]
local nnamed = tonumber(ARGV[FIRST_OWN_ARG + 2])
local named = {}
for k = FIRST_OWN_ARG + 3, FIRST_OWN_ARG + 2 + nnamed do named[ARGV[k]] = true end
local refusal = RESET.read(FIRST_OWN_ARG + 3 + nnamed, named)
if refusal then return refusal end
if #RESET.list == 0 then return {OK, 0} end
-- a child kept that is queued or waits for a retry would start without the cleared result
for _, i in ipairs(RESET.list) do
  for c in string.gmatch(redis.call('HGET', TASKS, TF_CHILDREN .. i) or '', '[^,]+') do
    local state = task_state(c)
    if not RESET.revived[c] and (state == T_QUEUED or state == T_RETRY_WAIT) then
      return {WRONG_STATE, 'task ' .. task_name(c) .. ', below ' .. task_name(i) .. ', is '
        .. state .. ' and would start without its result: clear it too once it has started'}
    end
  end
end

local now = now_ms()
RESET.uncount(RESET.list)
local failed, skipped = RESET.apply(now, EVENT_KIND.CLEARED)
for _, i in ipairs(RESET.list) do
  if named[i] then RESET.record_by_hand(i, task_state(i), now, who, 'cleared', why) end
end
flush_wakes()
RESET.reopen_job(PACKED, #RESET.list, failed, skipped, now)
return {OK, #RESET.list}
