-- Headless Neovim (0.7+) driving the ddp-lint language server through Neovim's own LSP client.
-- Run: DDP_FILE=... DDP_PYTHON=... DDP_RESULT=... nvim --headless --clean -u NONE -c "luafile nvim_ddp.lua"
-- Exit status 0 = pass. The result file gets one "key value" line per step for the pytest side.
local file = assert(os.getenv('DDP_FILE'), 'DDP_FILE not set')
local python = assert(os.getenv('DDP_PYTHON'), 'DDP_PYTHON not set')
local result_path = assert(os.getenv('DDP_RESULT'), 'DDP_RESULT not set')
local root = vim.fn.fnamemodify(file, ':p:h')
local out = assert(io.open(result_path, 'w'))

local function say(key, value)
  out:write(key .. ' ' .. tostring(value) .. '\n')
  out:flush()
end

local function fail(msg)
  say('FAIL', msg)
  io.stderr:write('FAIL: ' .. msg .. '\n')
  out:close()
  vim.cmd('cquit 1')
end

local function code_of(d)
  if d.code ~= nil then return d.code end
  local lsp = d.user_data and d.user_data.lsp
  return lsp and lsp.code
end

local function find_diag(bufnr, code)
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if code_of(d) == code then return d end
  end
  return nil
end

local function main()
  vim.cmd('edit ' .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local client_id = vim.lsp.start_client({
    name = 'ddp-lint',
    cmd = { python, '-m', 'ddp_lint.lsp_server' },
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = 'ws' } },
  })
  if not client_id then return fail('start_client returned nil') end
  vim.lsp.buf_attach_client(bufnr, client_id)

  -- 1. both diagnostics, at the right lines
  local ok = vim.wait(60000, function()
    return find_diag(bufnr, 'DDP001') ~= nil and find_diag(bufnr, 'DDP101') ~= nil
  end, 50)
  if not ok then return fail('no DDP001 + DDP101 within 60 s: ' .. vim.inspect(vim.diagnostic.get(bufnr))) end
  local client = vim.lsp.get_client_by_id(client_id)
  say('encoding', client.offset_encoding)
  for _, code in ipairs({ 'DDP001', 'DDP101' }) do
    local d = find_diag(bufnr, code)
    say(code, d.lnum .. ':' .. d.col .. ' ' .. tostring(d.source) .. ' sev=' .. tostring(d.severity))
  end

  -- 2. apply each quick fix through Neovim's own LSP edit machinery
  for _, code in ipairs({ 'DDP001', 'DDP101' }) do
    local d = find_diag(bufnr, code)
    if not d then return fail(code .. ' disappeared before its fix') end
    local params = {
      textDocument = { uri = vim.uri_from_bufnr(bufnr) },
      range = { start = { line = d.lnum, character = d.col }, ['end'] = { line = d.lnum, character = d.col } },
      context = { diagnostics = vim.lsp.diagnostic.get_line_diagnostics(bufnr, d.lnum) },
    }
    local results = vim.lsp.buf_request_sync(bufnr, 'textDocument/codeAction', params, 20000)
    local res = results and results[client_id]
    if not res or res.err or not res.result then
      return fail('no code actions for ' .. code .. ': ' .. vim.inspect(results))
    end
    local chosen = nil
    for _, a in ipairs(res.result) do
      if a.isPreferred and a.edit and string.find(a.title, code, 1, true) then chosen = a end
    end
    if not chosen then return fail('no preferred quick fix for ' .. code .. ': ' .. vim.inspect(res.result)) end
    say('action', chosen.title)
    local before = vim.api.nvim_buf_get_changedtick(bufnr)
    vim.lsp.util.apply_workspace_edit(chosen.edit, client.offset_encoding)
    if vim.api.nvim_buf_get_changedtick(bufnr) == before then return fail('the edit changed nothing') end
    -- the server re-analyses the edited buffer: this code goes away
    ok = vim.wait(20000, function() return find_diag(bufnr, code) == nil end, 50)
    if not ok then return fail(code .. ' still reported after its fix') end
  end

  -- 3. write the file
  vim.cmd('silent write')
  say('written', 'yes')
  client.stop()
  vim.wait(5000, function() return client.is_stopped() end, 50)
  say('PASS', 'yes')
  out:close()
  vim.cmd('qall!')
end

local okm, err = pcall(main)
if not okm then fail(tostring(err)) end
