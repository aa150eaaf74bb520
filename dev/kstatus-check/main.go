// kstatus-check prints kstatus' verdict on Kubernetes objects: the library Flux (and kubectl-style
// tools) use to judge health (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute); with
// -argocd-health FILE also the verdict of an Argo CD Lua health check, run with gopher-lua (the Lua
// VM Argo CD embeds) the way Argo CD runs it (the object as the global `obj`, the script returns
// {status, message}).
//
// Input: on stdin, one object or a List (`kubectl get ... -o json`). Output: one JSON line per
// object. Used by tests/real/test_kstatus.py on BatchConsumerGroups read from the real API server;
// built by dev/build-kstatus-check.sh.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Name          string `json:"name"`
	Namespace     string `json:"namespace"`
	Status        string `json:"status"`
	Message       string `json:"message"`
	ArgoCDStatus  string `json:"argocdStatus,omitempty"`
	ArgoCDMessage string `json:"argocdMessage,omitempty"`
}

func toLua(L *lua.LState, v interface{}) lua.LValue {
	switch x := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(x)
	case float64:
		return lua.LNumber(x)
	case string:
		return lua.LString(x)
	case []interface{}:
		t := L.NewTable()
		for _, e := range x {
			t.Append(toLua(L, e))
		}
		return t
	case map[string]interface{}:
		t := L.NewTable()
		for k, e := range x {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	}
	return lua.LString(fmt.Sprint(v))
}

func argoHealth(script string, obj map[string]interface{}) (string, string, error) {
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return "", "", err
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the health script returned %s, not a table", L.Get(-1).Type())
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message")), nil
}

func main() {
	argo := flag.String("argocd-health", "", "also run this Argo CD Lua health check on each object")
	flag.Parse()
	script := ""
	if *argo != "" {
		b, err := os.ReadFile(*argo)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		script = string(b)
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading stdin:", err)
		os.Exit(2)
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(raw, &obj); err != nil {
		fmt.Fprintln(os.Stderr, "stdin is not a JSON object:", err)
		os.Exit(2)
	}
	items := []map[string]interface{}{obj}
	if list, ok := obj["items"].([]interface{}); ok {
		items = items[:0]
		for _, it := range list {
			if m, ok := it.(map[string]interface{}); ok {
				items = append(items, m)
			}
		}
	}
	enc := json.NewEncoder(os.Stdout)
	for _, it := range items {
		// unstructured's own decoding: integers as int64, as kstatus' NestedInt64 reads them
		// (encoding/json would give float64 and the generation check would error)
		b, _ := json.Marshal(it)
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			fmt.Fprintln(os.Stderr, "decoding an object:", err)
			os.Exit(2)
		}
		res, err := status.Compute(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s/%s: %v\n", u.GetNamespace(), u.GetName(), err)
			os.Exit(1)
		}
		v := verdict{Name: u.GetName(), Namespace: u.GetNamespace(), Status: string(res.Status), Message: res.Message}
		if script != "" {
			if v.ArgoCDStatus, v.ArgoCDMessage, err = argoHealth(script, it); err != nil {
				fmt.Fprintf(os.Stderr, "%s/%s: argocd health: %v\n", u.GetNamespace(), u.GetName(), err)
				os.Exit(1)
			}
		}
		_ = enc.Encode(v)
	}
}
