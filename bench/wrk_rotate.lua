-- wrk_rotate.lua: POSTs a rotating set of AdmissionReview bodies, then prints one JSON line.
--
--   wrk -t1 -c32 -d10s -s bench/wrk_rotate.lua https://127.0.0.1:PORT/ -- BODIES
--
-- BODIES has one request per line: "PATH<TAB>BODY" (bench.harness.write_bodies writes it).
-- Every request is formatted once in init(); each thread starts at its own offset, so with
-- several threads the mix is the same. wrk keeps each of its connections alive.

local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  local file = args[1]
  if file == nil then
    error("usage: wrk ... -s wrk_rotate.lua URL -- BODIES")
  end
  local headers = { ["Content-Type"] = "application/json" }
  prepared = {}
  for line in io.lines(file) do
    local tab = line:find("\t", 1, true)
    if tab ~= nil then
      local path = line:sub(1, tab - 1)
      local body = line:sub(tab + 1)
      table.insert(prepared, wrk.format("POST", path, headers, body))
    end
  end
  if #prepared == 0 then
    error("no requests in " .. file)
  end
  counter = id or 0
end

function request()
  counter = counter + 1
  return prepared[(counter % #prepared) + 1]
end

function done(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
      .. '"latency_us": {"mean": %.1f, "stdev": %.1f, "max": %d, '
      .. '"p50": %d, "p90": %d, "p99": %d, "p999": %d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)
  ))
end
