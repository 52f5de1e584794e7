package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// DecodeJSON returns a Settings.Decode function that fills the adapter's
// Config from raw, a JSON object of its config keys (the keys of its TOML
// table, such as {"regions": ["us-east-1"], "boot_timeout": "20m"}).
// Durations are strings in time.ParseDuration's form. A key the Config does
// not have is an error naming it; empty raw is an empty section.
//
// The function may also be called directly, with a pointer to an adapter's
// Config: provider.DecodeJSON(raw)(&cfg).
func DecodeJSON(raw []byte) func(into any) error {
	return func(into any) error {
		return decodeDurations(into, func(v any) error {
			if len(bytes.TrimSpace(raw)) == 0 {
				return nil
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				var te *json.UnmarshalTypeError
				if errors.As(err, &te) && te.Field != "" {
					return fmt.Errorf("key %q: want %s, got a JSON %s", te.Field, typeWords(te.Type), te.Value)
				}
				return err
			}
			if _, err := dec.Token(); err != io.EOF {
				return errors.New("more than one JSON value: want one object")
			}
			return nil
		})
	}
}

// DecodeTOML returns a Settings.Decode function that fills the adapter's
// Config from raw, the body of its TOML table without the [header]:
//
//	regions      = ["us-east-1"]
//	boot_timeout = "20m"
//
// Durations are strings in time.ParseDuration's form. A key the Config does
// not have is an error naming it and its line.
//
// The function may also be called directly, with a pointer to an adapter's
// Config: provider.DecodeTOML(raw)(&cfg).
func DecodeTOML(raw []byte) func(into any) error {
	return func(into any) error {
		return decodeDurations(into, func(v any) error {
			err := toml.NewDecoder(bytes.NewReader(raw)).DisallowUnknownFields().Decode(v)
			var strict *toml.StrictMissingError
			if errors.As(err, &strict) {
				return &unknownKeysError{strict}
			}
			var de *toml.DecodeError
			if !errors.As(err, &de) {
				return err
			}
			row, _ := de.Position()
			k := de.Key()
			if len(k) == 0 {
				return fmt.Errorf("line %d: %w", row, err)
			}
			if want, got, ok := tomlTypes(raw, v, k); ok {
				return &typeError{line: row, key: strings.Join(k, "."), want: want, got: got, err: err}
			}
			return fmt.Errorf("line %d: key %q: %w", row, strings.Join(k, "."), err)
		})
	}
}

// typeError is a TOML value of the wrong type for its key, said in TOML's
// words rather than Go's.
type typeError struct {
	line      int
	key       string
	want, got string
	err       error
}

func (e *typeError) Error() string {
	return fmt.Sprintf("line %d: key %q: want %s, got %s", e.line, e.key, e.want, e.got)
}

func (e *typeError) Unwrap() error { return e.err }

// tomlTypes says what key of a top-level field of *v wants and what raw
// gives it, or false for a key it cannot follow.
func tomlTypes(raw []byte, v any, key []string) (want, got string, ok bool) {
	if len(key) != 1 {
		return "", "", false
	}
	t := reflect.TypeOf(v).Elem()
	var doc map[string]any
	if t.Kind() != reflect.Struct || toml.Unmarshal(raw, &doc) != nil {
		return "", "", false
	}
	val, found := doc[key[0]]
	if !found {
		return "", "", false
	}
	for i := range t.NumField() {
		if keyOf(t.Field(i)) == key[0] {
			return typeWords(t.Field(i).Type), valueWords(val), true
		}
	}
	return "", "", false
}

// valueWords says what a decoded TOML value is.
func valueWords(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// unknownKeysError names every key of a TOML section that the Config lacks.
type unknownKeysError struct{ err *toml.StrictMissingError }

func (e *unknownKeysError) Error() string {
	var keys []string
	for _, d := range e.err.Errors {
		row, _ := d.Position()
		keys = append(keys, fmt.Sprintf("%q (line %d)", strings.Join(d.Key(), "."), row))
	}
	if len(keys) == 1 {
		return "unknown key " + keys[0]
	}
	return "unknown keys " + strings.Join(keys, ", ")
}

func (e *unknownKeysError) Unwrap() error { return e.err }

// typeWords says what a Go type holds, for an error about a value of the
// wrong type.
func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeWords(t.Elem()), "a "), "an ") + "s"
	}
	return t.String()
}

var durationType = reflect.TypeFor[time.Duration]()

// decodeDurations runs decode on into, a pointer to a config struct, so that
// each of its time.Duration fields is read as a string ("90s"): decode gets
// a pointer to a struct with the same fields and tags in which those fields
// are strings, and the strings are parsed afterwards, each error naming its
// key. Any other into goes to decode unchanged.
func decodeDurations(into any, decode func(any) error) error {
	rv := reflect.ValueOf(into)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("decode into %T: want a non-nil pointer to a config struct", into)
	}
	t := rv.Elem().Type()
	text, ok := textForm(t)
	if !ok {
		return decode(into)
	}
	tv := reflect.New(text).Elem()
	dst := rv.Elem()
	for i := range text.NumField() {
		f := dst.FieldByName(text.Field(i).Name)
		if f.Type() == durationType {
			if d := time.Duration(f.Int()); d != 0 {
				tv.Field(i).SetString(d.String())
			}
			continue
		}
		tv.Field(i).Set(f)
	}
	if err := decode(tv.Addr().Interface()); err != nil {
		return err
	}
	for i := range text.NumField() {
		sf := text.Field(i)
		f := dst.FieldByName(sf.Name)
		if f.Type() != durationType {
			f.Set(tv.Field(i))
			continue
		}
		s := tv.Field(i).String()
		if s == "" {
			f.SetInt(0)
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration such as \"90s\" or \"20m\"", keyOf(sf), s)
		}
		if d < 0 {
			return fmt.Errorf("%s: %q is negative", keyOf(sf), s)
		}
		f.SetInt(int64(d))
	}
	return nil
}

// textForm returns t with its time.Duration fields turned into strings,
// and false when t is not a struct, has none, or has an embedded field.
// Unexported fields are left out.
func textForm(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	var fields []reflect.StructField
	durations := false
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return nil, false
		}
		if !f.IsExported() {
			continue
		}
		nf := reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag}
		if f.Type == durationType {
			nf.Type, durations = reflect.TypeFor[string](), true
		}
		fields = append(fields, nf)
	}
	if !durations {
		return nil, false
	}
	return reflect.StructOf(fields), true
}

// keyOf is the config key of a field: its toml tag, else its json tag,
// else its name.
func keyOf(f reflect.StructField) string {
	for _, tag := range []string{"toml", "json"} {
		if name, _, _ := strings.Cut(f.Tag.Get(tag), ","); name != "" && name != "-" {
			return name
		}
	}
	return f.Name
}
