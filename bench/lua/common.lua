-- Shared by every scenario (bench/run.py prepends it to the scenario's script).
-- Numbers the threads, reads id files, and prints one machine-readable summary line.

local next_thread = 0
threads = {} -- every thread, for a done() that sums what they counted

function setup(thread)
  thread:set("thread_index", next_thread)
  next_thread = next_thread + 1
  threads[#threads + 1] = thread
end

function read_lines(path)
  local lines = {}
  for line in io.lines(path) do
    if line ~= "" then
      lines[#lines + 1] = line
    end
  end
  return lines
end

-- This thread's share of a file's lines (every n-th, n threads), for scenarios that
-- use each line once.
function read_share(path, count)
  local share = {}
  for i, line in ipairs(read_lines(path)) do
    if (i - 1) % count == thread_index then
      share[#share + 1] = line
    end
  end
  return share
end

-- wrk.format replaces wrk.headers (the --header options) with the table it is given:
-- scripts that add a header start from a copy of them.
function headers_with(extra)
  local headers = {}
  for name, value in pairs(wrk.headers) do
    headers[name] = value
  end
  for name, value in pairs(extra) do
    headers[name] = value
  end
  return headers
end

-- The summary line run.py reads; ``extra``: more integer fields a scenario counted.
function summarize(summary, latency, extra)
  local e = summary.errors
  local fields = ""
  for name, value in pairs(extra or {}) do
    fields = fields .. string.format(', "%s": %d', name, value)
  end
  io.write(string.format(
    'BENCH_RESULT {"requests": %d, "duration_us": %d, "status_errors": %d, ' ..
    '"connect_errors": %d, "read_errors": %d, "write_errors": %d, "timeouts": %d, ' ..
    '"p50_us": %.1f, "p90_us": %.1f, "p99_us": %.1f, "max_us": %.1f, "mean_us": %.1f%s}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean, fields))
end

function done(summary, latency, requests)
  summarize(summary, latency)
end
