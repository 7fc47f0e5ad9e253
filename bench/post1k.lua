-- wrk script: POST a 1 KiB JSON-ish body. Counts non-2xx separately via wrk's summary.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"pad":"' .. string.rep("x", 1024 - 11) .. '"}'
