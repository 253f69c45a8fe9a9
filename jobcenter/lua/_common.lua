--[[ _common: helpers prepended to every script, after the generated state constants.
  Defines no key: every key a script touches comes in its KEYS. ]]

-- Redis TIME in milliseconds: every stored time comes from the server, never a worker clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local WAKE_TOKENS_MAX = 8 -- tokens pushed per burst: wakes up to 8 idle workers at once
local WAKE_LIST_MAX = 64 -- tokens kept while nobody sleeps, so the list stays small

-- Push wake-up tokens that idle workers BLPOP instead of polling.
local function wake(key, n)
  if n > WAKE_TOKENS_MAX then n = WAKE_TOKENS_MAX end
  for _ = 1, n do redis.call('RPUSH', key, 1) end
  redis.call('LTRIM', key, -WAKE_LIST_MAX, -1)
end
