--[[ hashtables: make a shard's hashes that grow with use and that the task path reads on
  every call hash tables, not listpacks whose every field read scans the whole hash
  (schema.py, HASHTABLE_FIELD). Recovery runs it each pass (ARCHITECTURE.md, Recovery rule
  10): a running Redis never turns a hash table back, but a hash it loaded from disk comes
  back a listpack, and a new one starts as one. A hash that does not exist is left so.
  KEYS[1] the shard's metrics hash  KEYS[2] its learned-estimates hash
  ARGV[1]: none, nor any other
  Returns {0} ]]

for k = 1, 2 do
  if redis.call('EXISTS', KEYS[k]) == 1 then as_hashtable(KEYS[k]) end
end
return {OK}
