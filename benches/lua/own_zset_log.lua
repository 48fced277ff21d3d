-- A sorted-set sliding-window log in the style the articles teach,
-- written for the benchmarks and deliberately not in the native catalogue
-- (src/cmd/script/native): it always runs in the Lua VM. One member per
-- admitted request, scored by the server's TIME in microseconds; the log
-- key is built inside the script from KEYS[1].
-- ARGV: limit, window in seconds. Returns {allowed, count}.
local log = KEYS[1] .. ':log'
local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2]) * 1000000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window_us)
local count = redis.call('ZCARD', log)
if count >= limit then
  return {0, count}
end
redis.call('ZADD', log, now, now .. ':' .. count)
redis.call('PEXPIRE', log, math.ceil(window_us / 1000))
return {1, count + 1}
