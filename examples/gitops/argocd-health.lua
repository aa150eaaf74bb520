-- Argo CD health check for lagpilot.io/BatchConsumerGroup (docs/gitops.md). Install it under the
-- argocd-cm key `resource.customizations.health.lagpilot.io_BatchConsumerGroup`. It reads the same
-- conditions kstatus reads (status.observedGeneration, Stalled, Reconciling, Ready) and maps a
-- paused group to Suspended. tests/real/test_kstatus.py runs it with gopher-lua (Argo CD's Lua VM).
local hs = { status = "Progressing", message = "waiting for the lagpilot operator's first status" }
if obj.status == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil
    and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "generation " .. obj.metadata.generation .. " not yet observed (observedGeneration "
      .. obj.status.observedGeneration .. ")"
  return hs
end
local c = {}
if obj.status.conditions ~= nil then
  for _, cond in ipairs(obj.status.conditions) do
    c[cond.type] = cond
  end
end
local function say(cond)
  return (cond.reason or "") .. ": " .. (cond.message or "")
end
if c.Stalled ~= nil and c.Stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = say(c.Stalled)
  return hs
end
if c.Ready ~= nil and c.Ready.status == "False" and c.Ready.reason == "Paused" then
  hs.status = "Suspended"
  hs.message = say(c.Ready)
  return hs
end
if c.Reconciling ~= nil and c.Reconciling.status == "True" then
  hs.message = say(c.Reconciling)
  return hs
end
if c.Ready ~= nil and c.Ready.status == "True" then
  hs.status = "Healthy"
  hs.message = say(c.Ready)
  return hs
end
if c.Ready ~= nil then
  hs.message = say(c.Ready)
end
return hs
