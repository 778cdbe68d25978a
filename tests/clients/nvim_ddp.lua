-- Headless Neovim (0.7+) driving the ddp-lint language server through Neovim's own LSP client,
-- started by a configuration snippet copied verbatim out of docs/editors.md (DDP_SNIPPET).
-- Run: DDP_FILE=... DDP_SNIPPET=... DDP_RESULT=... nvim --headless --clean -u NONE -c "luafile nvim_ddp.lua"
-- (`ddp-lint` must be on PATH, as the snippets expect.)
-- Exit status 0 = pass. The result file gets one "key value" line per step for the pytest side.
local file = assert(os.getenv('DDP_FILE'), 'DDP_FILE not set')
local snippet = assert(os.getenv('DDP_SNIPPET'), 'DDP_SNIPPET not set')
local result_path = assert(os.getenv('DDP_RESULT'), 'DDP_RESULT not set')
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

local function buf_clients(bufnr)
  if vim.lsp.get_clients then return vim.lsp.get_clients({ bufnr = bufnr }) end -- 0.10+
  return vim.tbl_values(vim.lsp.buf_get_clients(bufnr))
end

local function line_diagnostics(bufnr, d)
  if vim.lsp.diagnostic.get_line_diagnostics then -- up to 0.10
    return vim.lsp.diagnostic.get_line_diagnostics(bufnr, d.lnum)
  end
  return { d.user_data and d.user_data.lsp }
end

local function main()
  -- the user's init.lua: the snippet exactly as the docs show it
  dofile(snippet)
  say('snippet', snippet)
  vim.cmd('edit ' .. vim.fn.fnameescape(file)) -- FileType python: the snippet starts the client
  local bufnr = vim.api.nvim_get_current_buf()
  local client = nil
  local attached = vim.wait(30000, function()
    for _, c in ipairs(buf_clients(bufnr)) do
      if c.name == 'ddp-lint' or c.name == 'ddp_lint' then client = c return true end
    end
    return false
  end, 50)
  if not attached then return fail('no ddp-lint client attached to the buffer within 30 s') end
  local client_id = client.id
  say('client', client.name)

  -- 1. both diagnostics, at the right lines
  local ok = vim.wait(60000, function()
    return find_diag(bufnr, 'DDP001') ~= nil and find_diag(bufnr, 'DDP101') ~= nil
  end, 50)
  if not ok then return fail('no DDP001 + DDP101 within 60 s: ' .. vim.inspect(vim.diagnostic.get(bufnr))) end
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
      context = { diagnostics = line_diagnostics(bufnr, d) },
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
  vim.lsp.stop_client(client_id)
  vim.wait(5000, function() return vim.lsp.get_client_by_id(client_id) == nil end, 50)
  say('PASS', 'yes')
  out:close()
  vim.cmd('qall!')
end

local okm, err = pcall(main)
if not okm then fail(tostring(err)) end
