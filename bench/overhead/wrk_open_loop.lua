-- Open-loop, fixed-rate load for wrk (see bench/overhead_wrk.py for the method).
-- Arguments after `--`: rate per wrk thread (req/s), model name, fraction of streaming
-- requests (0..1), then any extra request headers as "name: value". Every thread keeps one schedule of send slots spaced
-- 1/rate apart; whichever connection is free claims the next slot and sleeps until it.
-- A slot claimed after its time (every connection was busy) is sent at once and counted
-- as late, with how late it was: that is the coordinated-omission part wrk cannot see.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } kvgate_timespec;
int clock_gettime(int clk_id, kvgate_timespec *tp);
]]
local ts = ffi.new("kvgate_timespec")
local CLOCK_MONOTONIC = 1

local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

local interval_ms, next_slot, requests, stream_every
late, late_ms, issued = 0, 0, 0

local function body(model, prompt, stream)
  return string.format(
    '{"model":"%s","messages":[{"role":"system","content":"You are a terse assistant."},'
      .. '{"role":"user","content":"%s"}],"max_tokens":3,"stream":%s}',
    model, prompt, stream and "true" or "false")
end

function init(args)
  local rate = tonumber(args[1])
  local model = args[2] or "bench"
  local stream_fraction = tonumber(args[3] or "0.5")
  local prompt = "Say ok three times."
  interval_ms = 1000 / rate
  local headers = { ["Content-Type"] = "application/json" }
  for i = 4, #args do
    local name, value = string.match(args[i], "^([^:]+):%s*(.*)$")
    if name then
      headers[name] = value
    end
  end
  local path = "/v1/chat/completions"
  requests = {
    plain = wrk.format("POST", path, headers, body(model, prompt, false)),
    stream = wrk.format("POST", path, headers, body(model, prompt, true)),
  }
  -- Every k-th request streams (k = 1/fraction), so the mix is exact and deterministic.
  stream_every = stream_fraction > 0 and math.floor(1 / stream_fraction + 0.5) or 0
end

function delay()
  local now = now_ms()
  if next_slot == nil then
    next_slot = now
  end
  local slot = next_slot
  next_slot = next_slot + interval_ms
  local wait = slot - now
  if wait < -1 then
    late = late + 1
    late_ms = late_ms - wait
  end
  if wait <= 0 then
    return 0
  end
  return math.floor(wait + 0.5) -- wrk's timers have millisecond resolution
end

function request()
  issued = issued + 1
  if stream_every > 0 and issued % stream_every == 0 then
    return requests.stream
  end
  return requests.plain
end

function done(summary, latency, _)
  local total_late, total_late_ms = 0, 0
  for _, t in ipairs(threads) do
    total_late = total_late + t:get("late")
    total_late_ms = total_late_ms + t:get("late_ms")
  end
  local e = summary.errors
  io.write(string.format(
    'KVGATE_WRK {"requests":%d,"duration_us":%d,"errors_connect":%d,"errors_read":%d,'
      .. '"errors_write":%d,"errors_status":%d,"errors_timeout":%d,"late":%d,"late_ms":%.3f,'
      .. '"lat_mean_us":%.1f,"lat_max_us":%d,"lat_p50_us":%d,"lat_p90_us":%d,'
      .. '"lat_p99_us":%d,"lat_p999_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    total_late, total_late_ms, latency.mean, latency.max, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
