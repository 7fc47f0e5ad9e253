-- wrk script for bench/fleet.sh: POST a 1 KiB JSON body (as bench/post1k.lua) with a
-- unique X-GitHub-Delivery on every request, so that with `dedupe: github` each hook has
-- an event key that nobody has claimed yet: every request is charged and claimed, none is
-- answered as a duplicate. The key is "<wrk thread>-<start second>-<counter>".
local n = 0

function setup(thread)
  n = n + 1
  thread:set("tid", n)
end

function init(args)
  prefix = string.format("bench-%d-%d-", tid or 0, os.time())
  count = 0
  hdrs = { ["Content-Type"] = "application/json" }
  body = '{"pad":"' .. string.rep("x", 1024 - 11) .. '"}'
end

function request()
  count = count + 1
  hdrs["X-GitHub-Delivery"] = prefix .. count
  return wrk.format("POST", nil, hdrs, body)
end
