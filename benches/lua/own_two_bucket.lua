-- A two-bucket sliding-window limiter in the style the articles teach,
-- written for the benchmarks and deliberately not in the native catalogue
-- (src/cmd/script/native): it always runs in the Lua VM. The bucket keys
-- are built inside the script from KEYS[1] and the server's TIME, so
-- Turnstile takes their shards as the script reaches them.
-- ARGV: limit, window in seconds. Returns {allowed, remaining, used}.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_hits = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2]) * 1000
local bucket = math.floor(now_ms / window_ms)
local cur_key = KEYS[1] .. ':w:' .. bucket
local prev_key = KEYS[1] .. ':w:' .. (bucket - 1)
local weight = 1 - (now_ms - bucket * window_ms) / window_ms
local prev_hits = tonumber(redis.call('GET', prev_key)) or 0
local cur_hits = tonumber(redis.call('GET', cur_key)) or 0
local used = math.floor(prev_hits * weight) + cur_hits
if used >= max_hits then
  return {0, 0, used}
end
cur_hits = redis.call('INCR', cur_key)
if cur_hits == 1 then
  redis.call('PEXPIRE', cur_key, window_ms * 2)
end
return {1, max_hits - used - 1, used + 1}
