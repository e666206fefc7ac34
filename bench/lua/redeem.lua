-- POST /api/v1/receipts/redeem, each receipt once: thread i walks every n-th receipt of
-- the file. Args: receipts file, thread count. Should the file run out, the walk starts
-- over and the 409 answers (RECEIPT_USED_UP) show up as errors in the summary instead of
-- passing unnoticed.
local receipts = {}
local position = 0
local headers = headers_with({ ["Content-Type"] = "application/json" })

function init(args)
  local count = tonumber(args[2])
  for i, token in ipairs(read_lines(args[1])) do
    if (i - 1) % count == thread_index then
      receipts[#receipts + 1] = token
    end
  end
end

function request()
  position = position + 1
  local token = receipts[(position - 1) % #receipts + 1]
  return wrk.format("POST", nil, headers, '{"receipt": "' .. token .. '"}')
end
