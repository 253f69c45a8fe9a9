--[[ singleton: a lease that makes one holder at a time (recovery runs, scheduler ticks),
  and runs each periodic round at most once.
  KEYS[1] lease key  KEYS[2] last round key
  ARGV[1] 'acquire' | 'renew' | 'release'  ARGV[2] holder id  ARGV[3] lease ms
  ARGV[4] round number (acquire only: the round this holder wants to run; 0 for any)
  Returns {0} done | {1} this round ran already | {-1} held by another holder ]]

local lease, last = KEYS[1], KEYS[2]
local mode, holder, ms, round = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4] or 0)
local current = redis.call('GET', lease)

if mode == 'acquire' then
  if current and current ~= holder then return {HELD} end
  if round > 0 and tonumber(redis.call('GET', last) or 0) >= round then return {ALREADY} end
  redis.call('SET', lease, holder, 'PX', ms)
  if round > 0 then redis.call('SET', last, round) end
  return {OK}
end
if current ~= holder then return {HELD} end
if mode == 'renew' then
  redis.call('PEXPIRE', lease, ms)
else
  redis.call('DEL', lease)
end
return {OK}
