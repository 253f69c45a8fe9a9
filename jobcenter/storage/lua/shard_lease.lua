--[[ shard_lease: a worker takes, renews or gives back its lease on one segment of one shard
  (the shard's tasks of one queue, or its leader messages): what it polls (owned segments).
  A segment may have several owners (more workers than shards); each lease is a member
  "<handler>|<token>" of the segment's owners zset, scored by its deadline (ms, Redis TIME).
  The token, drawn from the shard's epoch counter at each take, fences renewals and give-backs:
  a lease that expired, was given back or was taken anew is never renewed under the old token.
  KEYS[1] the segment's owners zset  KEYS[2] the shard's lease epoch counter
  ARGV[1] 'take' | 'renew' | 'give_back'  ARGV[2] handler  ARGV[3] lease ms (take, renew)
  ARGV[4] token (renew, give_back)
  ARGV[5] give_back only: '1' gives back only while another live owner keeps the segment
  Returns take: {0, token, deadline ms} | renew: {0, deadline ms} | give_back: {0}
    | {1} give_back: no lease under that token (expired or given back already)
    | {-2} renew: no live lease under that token: take the segment again
    | {-8} give_back with '1': no other live owner, the lease is kept ]]

local owners, epoch = KEYS[1], KEYS[2]
local mode, handler = ARGV[1], ARGV[2]
local now = now_ms()

if mode == 'take' then
  local deadline = now + tonumber(ARGV[3])
  -- no check can refuse a take: drop the expired leases and any older lease of this
  -- handler (a take whose reply was lost), then add the new one
  redis.call('ZREMRANGEBYSCORE', owners, '-inf', now)
  local prefix = handler .. '|'
  for _, member in ipairs(redis.call('ZRANGE', owners, 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix then redis.call('ZREM', owners, member) end
  end
  local token = redis.call('INCR', epoch)
  redis.call('ZADD', owners, deadline, prefix .. token)
  return {OK, token, deadline}
end

local member = handler .. '|' .. ARGV[4]
local held = tonumber(redis.call('ZSCORE', owners, member) or 0)
local live = held > now

if mode == 'renew' then
  if not live then return {STALE_TOKEN} end
  local deadline = now + tonumber(ARGV[3])
  redis.call('ZADD', owners, deadline, member)
  return {OK, deadline}
end

-- give_back
if held == 0 then return {ALREADY} end
if ARGV[5] == '1' and live and redis.call('ZCOUNT', owners, '(' .. now, '+inf') < 2 then
  return {LAST_OWNER}
end
redis.call('ZREM', owners, member)
return {OK}
