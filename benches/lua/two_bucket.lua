-- The classic two-bucket sliding-window counter, as benches/compare.py
-- measures it on Turnstile and Redis: this project's own text, so it runs
-- in Turnstile's Lua VM (the native catalogue holds only scripts a library
-- ships). Two string keys per limiter, KEYS[1]:<window> for the current
-- window and the previous one, built in the script from the server's TIME;
-- the previous window's count weighted by what is left of it.
-- ARGV: limit, window in seconds. Returns {allowed, remaining}.
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cur = math.floor(t / period)
local elapsed = t - cur * period
local ckey = KEYS[1] .. ':' .. cur
local pkey = KEYS[1] .. ':' .. (cur - 1)
local prev = tonumber(redis.call('GET', pkey) or '0')
local curr = tonumber(redis.call('GET', ckey) or '0')
local estimate = prev * (period - elapsed) / period + curr
if estimate + 1 <= limit then
  redis.call('INCR', ckey)
  redis.call('EXPIRE', ckey, period * 2)
  return {1, math.floor(limit - estimate - 1)}
end
return {0, 0}
