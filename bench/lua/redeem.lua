-- POST /api/v1/receipts/redeem, each receipt once: thread i walks every n-th receipt of
-- the file. Args: receipts file, thread count. Should the file run out, the walk starts
-- over and the 409 answers (RECEIPT_USED_UP) show up as errors in the summary instead of
-- passing unnoticed.
local receipts = {}
local position = 0
local headers = headers_with({ ["Content-Type"] = "application/json" })

function init(args)
  receipts = read_share(args[1], tonumber(args[2]))
end

function request()
  position = position + 1
  local token = receipts[(position - 1) % #receipts + 1]
  return wrk.format("POST", nil, headers, '{"receipt": "' .. token .. '"}')
end
