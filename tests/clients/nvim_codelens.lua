-- Headless Neovim (0.7+): the ddp-lint server's code lenses through Neovim's own vim.lsp.codelens.
-- Run: DDP_FILE=... DDP_RESULT=... DDP_PYTHON=... nvim --headless --clean -u NONE -c "luafile nvim_codelens.lua"
-- Writes one "lens LINE TITLE COMMAND" line per lens (0-based line), then "PASS yes"; exit 0 = pass.
local file = assert(os.getenv('DDP_FILE'), 'DDP_FILE not set')
local result_path = assert(os.getenv('DDP_RESULT'), 'DDP_RESULT not set')
local python = assert(os.getenv('DDP_PYTHON'), 'DDP_PYTHON not set')
local out = assert(io.open(result_path, 'w'))

local function say(line)
  out:write(line .. '\n')
  out:flush()
end

local function fail(msg)
  say('FAIL ' .. msg)
  io.stderr:write('FAIL: ' .. msg .. '\n')
  out:close()
  vim.cmd('cquit 1')
end

local function main()
  vim.cmd('edit ' .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local client_id = vim.lsp.start_client({
    name = 'ddp-lint',
    cmd = { python, '-m', 'ddp_lint', 'server' },
    root_dir = vim.fn.fnamemodify(file, ':h'),
    init_options = { codeLens = true },
  })
  if not client_id then return fail('start_client returned nil') end
  vim.lsp.buf_attach_client(bufnr, client_id)
  local ready = vim.wait(30000, function()
    local c = vim.lsp.get_client_by_id(client_id)
    return c ~= nil and c.initialized == true and c.server_capabilities ~= nil
  end, 50)
  if not ready then return fail('the server did not initialise within 30 s') end
  local lenses = {}
  local ok = vim.wait(30000, function()
    vim.lsp.codelens.refresh()
    vim.wait(300)
    lenses = vim.lsp.codelens.get(bufnr) or {}
    return #lenses > 0
  end, 200)
  if not ok then return fail('no code lens within 30 s') end
  for _, lens in ipairs(lenses) do
    local cmd = lens.command or {}
    say('lens ' .. lens.range.start.line .. ' ' .. tostring(cmd.title) .. ' | ' .. tostring(cmd.command))
  end
  say('PASS yes')
  out:close()
  vim.lsp.get_client_by_id(client_id).stop()
  vim.wait(2000, function() return vim.lsp.get_client_by_id(client_id) == nil end, 50)
  vim.cmd('qall!')
end

local okm, err = pcall(main)
if not okm then fail(tostring(err)) end
