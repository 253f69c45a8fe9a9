--[[ claim: take due leader messages, report expired leases, move due retries, reserve tasks.
  KEYS[1] leader zset  KEYS[2] leases zset  KEYS[3] claims hash
  KEYS[4..] three per queue, in the worker's order: ready zset, delayed zset, wake list
  ARGV[1] handler id  ARGV[2] max leader messages  ARGV[3] max tasks  ARGV[4] lease ms
  ARGV[5] leader step timeout ms  ARGV[6] max expired leases to report
  Returns {leader messages "<kind>|<job>", expired lease members "<job>|<index>",
           reserved queue members "<seq>|<job>|<index>", ms until the next retry is due
           in these queues (-1: none)}
  A reserved task holds a lease and a claims entry; start.lua makes it running. A worker
  that dies in between leaves an expiring lease, so expire.lua puts the task back. ]]

local LEADER, LEASES, CLAIMS = KEYS[1], KEYS[2], KEYS[3]
local handler = ARGV[1]
local max_leader, want = tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_ms, leader_timeout_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local RETRIES_MOVED_MAX = 200 -- due retries moved per queue per call: bounded work

local now = now_ms()
local leader = {}
if max_leader > 0 then
  leader = redis.call('ZRANGEBYSCORE', LEADER, '-inf', now, 'LIMIT', 0, max_leader)
  for _, m in ipairs(leader) do redis.call('ZADD', LEADER, now + leader_timeout_ms, m) end
end

local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now, 'LIMIT', 0, tonumber(ARGV[6]))

local reserved = {}
local next_due = -1
for k = 4, #KEYS, 3 do
  local ready, delayed, wake_key = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, RETRIES_MOVED_MAX)
  for _, d in ipairs(due) do
    local prio, member = string.match(d, '^(-?%d+)|(.*)$')
    redis.call('ZADD', ready, -tonumber(prio), member)
    redis.call('ZREM', delayed, d)
  end
  if want > 0 then
    local popped = redis.call('ZPOPMIN', ready, want)
    local leases, claims = {}, {}
    for p = 1, #popped, 2 do
      local member = popped[p]
      local job, index = string.match(member, '^%d+|([^|]+)|(%d+)$')
      local lease = job .. '|' .. tonumber(index) -- leases name the unpadded index
      leases[#leases + 1] = now + lease_ms
      leases[#leases + 1] = lease
      claims[#claims + 1] = lease
      claims[#claims + 1] = handler
      reserved[#reserved + 1] = member
      want = want - 1
    end
    call_chunked('ZADD', LEASES, leases)
    call_chunked('HSET', CLAIMS, claims)
    -- more is ready: wake another idle worker rather than leave it asleep
    if redis.call('EXISTS', ready) == 1 then wake(wake_key, 1) end
  end
  local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if first[2] then
    local wait = math.max(0, tonumber(first[2]) - now)
    if next_due < 0 or wait < next_due then next_due = wait end
  end
end
return {leader, expired, reserved, next_due}

