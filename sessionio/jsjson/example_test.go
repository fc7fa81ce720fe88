package jsjson_test

import (
	"fmt"

	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

func ExampleMarshal() {
	entry := jsjson.Fields{
		{Key: "type", Value: "compaction"},
		{Key: "id", Value: "f0398941"},
		{Key: "parentId", Value: nil},
		{Key: "summary", Value: "Edited <main.go> & ran tests\ndone"},
		{Key: "tokensBefore", Value: 120.0},
		{Key: "details", Value: jsjson.Omit{}}, // undefined: left out
		{Key: "fromHook", Value: false},
	}
	line, err := jsjson.Marshal(entry)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
	// Output:
	// {"type":"compaction","id":"f0398941","parentId":null,"summary":"Edited <main.go> & ran tests\ndone","tokensBefore":120,"fromHook":false}
}
